/* Run a tensorplay model bundle from C: read inputs from a text file, print the outputs.
 *
 * Build (see Makefile): cc -I<bundle> -DMODEL=<name> -include <name>.h main.c -L<bundle> -l<name>
 * Input file: for each model input in order, its dims (as many as the input's rank) and then its
 * values, all whitespace-separated. Only float32 inputs and outputs are handled by this example.
 * Output: for each output, a line "<name> <rank> <dims...>" followed by one line of values.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MODEL
#error "define MODEL as the bundle's model name, e.g. -DMODEL=mlp"
#endif
#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define API(f) CAT(MODEL, f)
#define STR2(x) #x
#define STR(x) STR2(x)

static int fail(const char *what) {
  fprintf(stderr, "error: %s\n", what);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s WEIGHTS.tpw INPUTS.txt\n", argv[0]);
    return 2;
  }
  CAT(MODEL, model) *model = API(create)(argv[1]);
  if (model == NULL) return fail(API(last_error)());
  FILE *in = fopen(argv[2], "r");
  if (in == NULL) return fail("cannot open the inputs file");

  int n_in = API(num_inputs)(), n_out = API(num_outputs)(), total_in = 0, total_out = 0;
  for (int i = 0; i < n_in; i++) total_in += API(input_rank)(i);
  for (int i = 0; i < n_out; i++) total_out += API(output_rank)(i);
  int64_t *in_dims = calloc((size_t)total_in + 1, sizeof(int64_t));
  int64_t *out_dims = calloc((size_t)total_out + 1, sizeof(int64_t));
  void **inputs = calloc((size_t)n_in + 1, sizeof(void *));
  void **outputs = calloc((size_t)n_out + 1, sizeof(void *));
  int d = 0;
  for (int i = 0; i < n_in; i++) {
    if (strcmp(API(input_dtype)(i), "float32") != 0) return fail("this example reads float32 inputs only");
    int64_t count = 1;
    for (int a = 0; a < API(input_rank)(i); a++, d++) {
      long long v;
      if (fscanf(in, "%lld", &v) != 1 || v < 0) return fail("inputs file: expected a dimension");
      in_dims[d] = v;
      count *= v;
    }
    float *data = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    for (int64_t k = 0; k < count; k++)
      if (fscanf(in, "%f", &data[k]) != 1) return fail("inputs file: too few values");
    inputs[i] = data;
  }
  fclose(in);

  if (API(output_dims)(model, in_dims, out_dims) != 0) return fail(API(last_error)());
  d = 0;
  for (int i = 0; i < n_out; i++) {
    if (strcmp(API(output_dtype)(i), "float32") != 0) return fail("this example prints float32 outputs only");
    int64_t count = 1;
    for (int a = 0; a < API(output_rank)(i); a++) count *= out_dims[d + a];
    d += API(output_rank)(i);
    outputs[i] = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
  }
  if (API(run)(model, (const void *const *)inputs, in_dims, outputs) != 0) return fail(API(last_error)());

  d = 0;
  for (int i = 0; i < n_out; i++) {
    int rank = API(output_rank)(i);
    int64_t count = 1;
    printf("%s %d", API(output_name)(i), rank);
    for (int a = 0; a < rank; a++, d++) {
      printf(" %lld", (long long)out_dims[d]);
      count *= out_dims[d];
    }
    printf("\n");
    const float *y = outputs[i];
    for (int64_t k = 0; k < count; k++) printf(k ? " %.9g" : "%.9g", y[k]);
    printf("\n");
  }
  for (int i = 0; i < n_in; i++) free(inputs[i]);
  for (int i = 0; i < n_out; i++) free(outputs[i]);
  free(inputs); free(outputs); free(in_dims); free(out_dims);
  API(destroy)(model);
  return 0;
}
