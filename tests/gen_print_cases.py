"""Prints the rows of tests/test_print.c's `cases` table: each tensor's values (how the C
test builds them) and PyTorch's repr of the same tensor, as C string literals.

    /usr/bin/python3 tests/gen_print_cases.py   # needs torch (Debian: python3-torch)

Paste the output between the braces of `cases`. The values are exact in float32, so the C
side holds the same numbers PyTorch printed.
"""
import torch
def f(i): return ((i * 37) % 101) / 8.0 - 6.0
rows = []  # (name, builder C expression, torch tensor)
x4 = [1/3, 0.5, -2.75, 100.0]
specs = [
 ("mixed_2x3", "lit_f32", "{0.1940f, 2.1614f, -0.1721f, 0.8491f, -1.9244f, 0.6530f}", [2,3], "F32",
  torch.tensor([[0.1940, 2.1614, -0.1721], [0.8491, -1.9244, 0.6530]])),
 ("int_valued", "lit_f32", "{1, 2, 3}", [3], "F32", torch.tensor([1., 2., 3.])),
 ("zeros", "lit_f32", "{0, 0, 0}", [3], "F32", torch.zeros(3)),
 ("sci_small", "lit_f32", "{1e-5f, 1.0f, 123456.0f}", [3], "F32", torch.tensor([1e-5, 1.0, 123456.0])),
 ("sci_int", "lit_f32", "{1.0f, 1e9f}", [2], "F32", torch.tensor([1., 1e9])),
 ("nonfinite", "lit_f32", "{NAN, INFINITY, -INFINITY, 1.5f}", [4], "F32",
  torch.tensor([float('nan'), float('inf'), -float('inf'), 1.5])),
 ("neg_nan", "lit_f32", "{-NAN, 2.0f}", [2], "F32", torch.tensor([-float('nan'), 2.0])),
 ("only_nonfinite", "lit_f32", "{NAN, 0.0f, -INFINITY}", [3], "F32", torch.tensor([float('nan'), 0.0, -float('inf')])),
 ("neg_cols", "lit_f32", "{-1.0f, 10.5f, 100.25f, -1000.125f}", [2,2], "F32",
  torch.tensor([[-1.0, 10.5], [100.25, -1000.125]])),
 ("f16", "lit_f32", "{1.0f / 3.0f, 0.5f, -2.75f, 100.0f}", [4], "F16", torch.tensor(x4).to(torch.float16)),
 ("bf16", "lit_f32", "{1.0f / 3.0f, 0.5f, -2.75f, 100.0f}", [4], "BF16", torch.tensor(x4).to(torch.bfloat16)),
 ("wrap_30", "gen", "G_LIN(1.25, -7.0)", [30], "F32", torch.tensor([i * 1.25 - 7.0 for i in range(30)])),
 ("sum_1d", "gen", "G_LIN(0.5, 0.0)", [2000], "F32", torch.tensor([i * 0.5 for i in range(2000)])),
 ("sum_3d", "gen", "G_MOD", [20,30,4], "F32", torch.tensor([f(i) for i in range(2400)]).reshape(20,30,4)),
 ("sum_7x200", "gen", "G_MOD", [7,200], "F32", torch.tensor([f(i) for i in range(1400)]).reshape(7,200)),
 ("sum_6x200", "gen", "G_MOD", [6,200], "F32", torch.tensor([f(i) for i in range(1200)]).reshape(6,200)),
 ("dims_4", "gen", "G_MOD", [2,2,2,3], "F32", torch.tensor([f(i) for i in range(24)]).reshape(2,2,2,3)),
 ("wrap_edge_2x10", "gen", "G_LIN(0.25, 0.0)", [2,10], "F32", torch.tensor([i * 0.25 for i in range(20)]).reshape(2,10)),
 ("suffix_wrap", "gen", "G_LIN(1.5, 0.25)", [10], "F16", torch.tensor([i * 1.5 + 0.25 for i in range(10)]).to(torch.float16)),
 ("scalar", "lit_f32", "{2.5f}", [], "F32", torch.tensor(2.5)),
 ("empty_1d", "lit_f32", "{0}", [0], "F32", torch.zeros(0)),
 ("empty_2d", "lit_f32", "{0}", [2,0], "F32", torch.zeros(2,0)),
 ("empty_i64", "lit_f32", "{0}", [0,3], "I64", torch.zeros(0,3,dtype=torch.int64)),
 ("empty_i32", "lit_f32", "{0}", [0], "I32", torch.zeros(0,dtype=torch.int32)),
 ("int32", "lit_f32", "{1, -20, 300, 4}", [2,2], "I32", torch.tensor([[1,-20],[300,4]], dtype=torch.int32)),
 ("int64", "lit_f32", "{5, 6}", [2], "I64", torch.tensor([5,6])),
 ("uint8", "lit_f32", "{0, 7, 255}", [3], "U8", torch.tensor([0,7,255], dtype=torch.uint8)),
 ("int_sum", "gen", "G_INT", [1500], "I32", torch.tensor([(i*7919) % 100003 - 50000 for i in range(1500)], dtype=torch.int32)),
]
out = []
for name, kind, data, shape, dt, t in specs:
    # our dtype names carry the library's prefix (dltrain.float16 where torch prints
    # torch.float16); no case here sits where the two extra characters change the wrapping
    s = repr(t).replace("dtype=torch.", "dtype=dltrain.")
    lines = s.replace("\\", "\\\\").replace('"', '\\"').split("\n")
    cstr = '"' + '\\n"\n     "'.join(lines) + '"'
    shp = "{" + ", ".join(map(str, shape)) + "}" if shape else "{0}"
    if kind == "lit_f32":
        out.append(f'    {{"{name}", DLT_{dt}, {len(shape)}, {shp}, (const float[]){data}, 0, 0, 0,\n     {cstr}}},')
    else:
        g = data
        if g.startswith("G_LIN"):
            a, b = g[6:-1].split(", ")
            out.append(f'    {{"{name}", DLT_{dt}, {len(shape)}, {shp}, NULL, G_LIN, {a}, {b},\n     {cstr}}},')
        else:
            out.append(f'    {{"{name}", DLT_{dt}, {len(shape)}, {shp}, NULL, {g}, 0, 0,\n     {cstr}}},')
print("\n".join(out))
