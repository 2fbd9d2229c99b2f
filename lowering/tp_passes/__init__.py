"""``tp`` -> ``tp`` passes that run before fusion."""
