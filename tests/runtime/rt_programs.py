"""Hand-written LLVM IR programs following the tensorplay.runtime.abi calling convention.

``affine``: inputs x: float32[n, m], b: float32[m]; outputs y = x * 2 + b (float32[n, m]) and
count = n (int64, rank 0). Assertions: 1 (shape) 2 <= n <= 64, values [n]; 2 (shape)
b.size(0) == m, values [b0, m]; 3 (value) every x >= 0; 4 (value) workspace 64-byte aligned.
The run phase stages x * 2 in the workspace (n*m floats) to exercise it.
"""

from tensorplay.runtime.abi import Assertion, Signature, TensorSpec

AFFINE_IR = r"""
define i32 @affine_prepare(ptr noalias %in_dims, ptr noalias %out_dims, ptr noalias %ws, ptr noalias %err) {
entry:
  %n = load i64, ptr %in_dims
  %pm = getelementptr inbounds i64, ptr %in_dims, i64 1
  %m = load i64, ptr %pm
  %pb = getelementptr inbounds i64, ptr %in_dims, i64 2
  %b0 = load i64, ptr %pb
  %lo = icmp slt i64 %n, 2
  %hi = icmp sgt i64 %n, 64
  %bad_n = or i1 %lo, %hi
  br i1 %bad_n, label %fail1, label %check2
fail1:
  store i64 %n, ptr %err
  ret i32 1
check2:
  %bad_b = icmp ne i64 %b0, %m
  br i1 %bad_b, label %fail2, label %ok
fail2:
  store i64 %b0, ptr %err
  %e1 = getelementptr inbounds i64, ptr %err, i64 1
  store i64 %m, ptr %e1
  ret i32 2
ok:
  store i64 %n, ptr %out_dims
  %o1 = getelementptr inbounds i64, ptr %out_dims, i64 1
  store i64 %m, ptr %o1
  %nm = mul i64 %n, %m
  %bytes = mul i64 %nm, 4
  store i64 %bytes, ptr %ws
  ret i32 0
}

define i32 @affine_run(ptr noalias %in_ptrs, ptr noalias %out_ptrs, ptr noalias %in_dims, ptr noalias %ws,
                       i32 %threads) {
entry:
  %x = load ptr, ptr %in_ptrs
  %pb = getelementptr inbounds ptr, ptr %in_ptrs, i64 1
  %b = load ptr, ptr %pb
  %y = load ptr, ptr %out_ptrs
  %pc = getelementptr inbounds ptr, ptr %out_ptrs, i64 1
  %cnt = load ptr, ptr %pc
  %n = load i64, ptr %in_dims
  %pm = getelementptr inbounds i64, ptr %in_dims, i64 1
  %m = load i64, ptr %pm
  %total = mul i64 %n, %m
  %wsi = ptrtoint ptr %ws to i64
  %mis = and i64 %wsi, 63
  %misaligned = icmp ne i64 %mis, 0
  br i1 %misaligned, label %fail4, label %stage
fail4:
  ret i32 4
stage:
  %i = phi i64 [0, %entry], [%i1, %stage_body]
  %more = icmp slt i64 %i, %total
  br i1 %more, label %stage_body, label %combine
stage_body:
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %vx = load float, ptr %px
  %neg = fcmp olt float %vx, 0.0
  %two = fmul float %vx, 2.0
  %pw = getelementptr inbounds float, ptr %ws, i64 %i
  store float %two, ptr %pw
  %i1 = add i64 %i, 1
  br i1 %neg, label %fail3, label %stage
fail3:
  ret i32 3
combine:
  %j = phi i64 [0, %stage], [%j1, %combine_body]
  %more2 = icmp slt i64 %j, %total
  br i1 %more2, label %combine_body, label %done
combine_body:
  %col = srem i64 %j, %m
  %pw2 = getelementptr inbounds float, ptr %ws, i64 %j
  %w = load float, ptr %pw2
  %pbj = getelementptr inbounds float, ptr %b, i64 %col
  %vb = load float, ptr %pbj
  %s = fadd float %w, %vb
  %py = getelementptr inbounds float, ptr %y, i64 %j
  store float %s, ptr %py
  %j1 = add i64 %j, 1
  br label %combine
done:
  store i64 %n, ptr %cnt
  ret i32 0
}
"""

AFFINE_SIGNATURE = Signature(
    inputs=(TensorSpec("x", "float32", 2, ("s0", "s1")), TensorSpec("b", "float32", 1, ("s1",))),
    outputs=(TensorSpec("y", "float32", 2, ("s0", "s1")), TensorSpec("count", "int64", 0, ())),
    assertions=(
        Assertion("shape", "runtime assertion failed: expected 2 <= x.size(0) <= 64, but got {0}", 1),
        Assertion("shape", "runtime assertion failed: b.size(0) = {0} must equal x.size(1) = {1}", 2),
        Assertion("value", "x must be non-negative {not a template}"),
        Assertion("value", "workspace is not 64-byte aligned"),
    ),
    meta={"producer": "tests/runtime/rt_programs.py"},
)


def affine_reference(x, b):
    """The numpy formula the program must reproduce."""
    return x * 2 + b


# ``probe``: input flag: int32[1]; outputs threads (int64, rank 0) = num_threads and
# ws_null (int64, rank 0) = 1 if the workspace pointer is NULL, and spins (int64, rank 0) =
# how often it saw the flag still unset. The run spins until
# flag[0] != 0 (assertion 1, value, on timeout), so it only finishes if another Python
# thread can set the flag while it runs, i.e. if the call released the GIL.
PROBE_IR = r"""
define i32 @probe_prepare(ptr noalias %in_dims, ptr noalias %out_dims, ptr noalias %ws, ptr noalias %err) {
  store i64 0, ptr %ws
  ret i32 0
}

define i32 @probe_run(ptr noalias %in_ptrs, ptr noalias %out_ptrs, ptr noalias %in_dims, ptr %ws,
                      i32 %threads) {
entry:
  %flag = load ptr, ptr %in_ptrs
  br label %spin
spin:
  %i = phi i64 [0, %entry], [%i1, %spin]
  %v = load atomic i32, ptr %flag acquire, align 4
  %i1 = add i64 %i, 1
  %set = icmp ne i32 %v, 0
  %timeout = icmp sgt i64 %i1, 20000000000
  %stop = or i1 %set, %timeout
  br i1 %stop, label %out, label %spin
out:
  br i1 %set, label %ok, label %fail
fail:
  ret i32 1
ok:
  %t = load ptr, ptr %out_ptrs
  %t64 = sext i32 %threads to i64
  store i64 %t64, ptr %t
  %pn = getelementptr inbounds ptr, ptr %out_ptrs, i64 1
  %n = load ptr, ptr %pn
  %isnull = icmp eq ptr %ws, null
  %z = zext i1 %isnull to i64
  store i64 %z, ptr %n
  %ps = getelementptr inbounds ptr, ptr %out_ptrs, i64 2
  %spins = load ptr, ptr %ps
  store i64 %i, ptr %spins
  ret i32 0
}
"""

PROBE_SIGNATURE = Signature(
    inputs=(TensorSpec("flag", "int32", 1),),
    outputs=(TensorSpec("threads", "int64", 0), TensorSpec("ws_null", "int64", 0),
             TensorSpec("spins", "int64", 0)),
    assertions=(Assertion("value", "probe timed out waiting for the flag"),),
)


def copy_ir(prefix: str, itemsize: int) -> str:
    """``<prefix>``: y = copy of x, both 1-d of an element type ``itemsize`` bytes wide."""
    return rf"""
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define i32 @{prefix}_prepare(ptr noalias %in_dims, ptr noalias %out_dims, ptr noalias %ws,
                            ptr noalias %err) {{
  %n = load i64, ptr %in_dims
  store i64 %n, ptr %out_dims
  store i64 0, ptr %ws
  ret i32 0
}}

define i32 @{prefix}_run(ptr noalias %in_ptrs, ptr noalias %out_ptrs, ptr noalias %in_dims, ptr %ws,
                        i32 %t) {{
  %x = load ptr, ptr %in_ptrs
  %y = load ptr, ptr %out_ptrs
  %n = load i64, ptr %in_dims
  %bytes = mul i64 %n, {itemsize}
  call void @llvm.memcpy.p0.p0.i64(ptr %y, ptr %x, i64 %bytes, i1 false)
  ret i32 0
}}
"""
