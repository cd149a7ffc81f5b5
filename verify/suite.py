"""The hack suite and the honest C++ twins, rendered from one template: every candidate is a self-contained file
(as a submitted candidate is), sharing one C++ extension source, so the extension builds once per build directory
and each candidate only loads it. ROUTES maps a route to (candidate source, the check that must catch it, the
checks switched off so that check is the one reached, device needed); TASK_OF names its task in TASKS (Linear ->
relu, or relu(cumsum(x, 1)) for the routes that leave a fallback operator to PyTorch). The C++ routes to ATen each
have a small extension of their own (ESCAPES), since the extension layer judges a whole shared object."""

from __future__ import annotations

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> relu"""

    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


batch_size = 64
n = 32


def get_inputs():
    return [torch.randn(batch_size, n)]


def get_init_inputs():
    return [n]
'''

EXT_SOURCE = r'''
#include <torch/extension.h>
#include <cstring>
torch::Tensor relu_k(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float* a = xc.data_ptr<float>(); float* b = y.data_ptr<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
  return y;
}
torch::Tensor cumsum_rows(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float* a = xc.data_ptr<float>(); float* b = y.data_ptr<float>();
  int64_t m = xc.size(0), n = xc.numel() / xc.size(0);
  for (int64_t r = 0; r < m; ++r) { float acc = 0.f; for (int64_t j = 0; j < n; ++j) { acc += a[r * n + j]; b[r * n + j] = acc; } }
  return y;
}
torch::Tensor relu_bf16(torch::Tensor x) {
  auto y = relu_k(x); float* b = y.data_ptr<float>();
  for (int64_t i = 0; i < y.numel(); ++i) { uint32_t u; std::memcpy(&u, &b[i], 4); u &= 0xFFFF0000u; std::memcpy(&b[i], &u, 4); }
  return y;
}
static torch::Tensor cached; static uint64_t cached_key = 0;
torch::Tensor relu_cached(torch::Tensor x) {
  auto xc = x.contiguous(); const uint32_t* w = reinterpret_cast<const uint32_t*>(xc.data_ptr<float>());
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < xc.numel(); ++i) h = (h ^ w[i]) * 1099511628211ull;
  if (h != cached_key || !cached.defined()) { cached = relu_k(xc); cached_key = h; }
  return cached;
}
void zero_(torch::Tensor x) { std::memset(x.data_ptr<float>(), 0, x.numel() * 4); }
'''

# The same functions as CUDA kernels, for verification on a GPU (a host loop over a device pointer would crash).
# Every kernel runs on the current stream, so work on a side stream stays there, as a real candidate's would.
CUDA_EXT_SOURCE = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <vector>
__global__ void relu_kernel(const float* a, float* b, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] > 0.f ? a[i] : 0.f;
}
__global__ void bf16_kernel(float* b, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) b[i] = __uint_as_float(__float_as_uint(b[i]) & 0xFFFF0000u);
}
__global__ void cumsum_rows_kernel(const float* a, float* b, int64_t m, int64_t n) {
  int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r < m) { float acc = 0.f; for (int64_t j = 0; j < n; ++j) { acc += a[r * n + j]; b[r * n + j] = acc; } }
}
static int blocks(int64_t n) { return (int)((n + 255) / 256); }
torch::Tensor relu_k(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int64_t n = xc.numel();
  if (n) relu_kernel<<<blocks(n), 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
torch::Tensor cumsum_rows(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int64_t m = xc.size(0), n = xc.numel() / xc.size(0);
  if (m) cumsum_rows_kernel<<<blocks(m), 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), m, n);
  return y;
}
torch::Tensor relu_bf16(torch::Tensor x) {
  auto y = relu_k(x);
  int64_t n = y.numel();
  if (n) bf16_kernel<<<blocks(n), 256, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), n);
  return y;
}
static torch::Tensor cached; static uint64_t cached_key = 0;
torch::Tensor relu_cached(torch::Tensor x) {
  auto xc = x.contiguous();
  std::vector<uint32_t> w(xc.numel());
  cudaMemcpy(w.data(), xc.data_ptr<float>(), w.size() * 4, cudaMemcpyDeviceToHost);
  uint64_t h = 1469598103934665603ull;
  for (uint32_t v : w) h = (h ^ v) * 1099511628211ull;
  if (h != cached_key || !cached.defined()) { cached = relu_k(xc); cached_key = h; }
  return cached;
}
void zero_(torch::Tensor x) { cudaMemsetAsync(x.data_ptr<float>(), 0, x.numel() * 4, at::cuda::getCurrentCUDAStream()); }
'''
CUDA_DECLS = ("torch::Tensor relu_k(torch::Tensor x); torch::Tensor cumsum_rows(torch::Tensor x); "
              "torch::Tensor relu_bf16(torch::Tensor x); torch::Tensor relu_cached(torch::Tensor x); "
              "void zero_(torch::Tensor x);")
FUNCTIONS = ["relu_k", "cumsum_rows", "relu_bf16", "relu_cached", "zero_"]

# An extension of its own for each C++ route to ATen (the shared one stays clean: the extension layer judges a
# whole shared object by what it imports). Device-agnostic C++: the same build serves a CPU and a CUDA tensor.
ATEN_HEADERS = "#include <ATen/ATen.h>\n#include <ATen/CPUFunctions.h>\n#include <torch/python.h>\n"
ESCAPES = {
    # through the dispatcher: the dispatch mode sees it (the guard's route), and so does the extension layer
    "aten": "at::Tensor f(at::Tensor x) { return at::relu(x); }",
    # past the Python dispatch key: the dispatch mode never sees these
    "exclude": ("at::Tensor f(at::Tensor x) {\n  c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKeySet("
                "{c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));\n"
                "  return at::_ops::cumsum::call(x, 1, std::nullopt);\n}"),
    "tls": ("at::Tensor f(at::Tensor x) {\n  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::Python, true);\n"
            "  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::PythonTLSSnapshot, true);\n"
            "  auto y = at::cumsum(x, 1);\n"
            "  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::Python, false);\n"
            "  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::PythonTLSSnapshot, false);\n  return y;\n}"),
    "redispatch": ("at::Tensor f(at::Tensor x) {\n  return at::_ops::cumsum::redispatch(c10::DispatchKeySet("
                   "x.is_cuda() ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU), x, 1, std::nullopt);\n}"),
    "backend": "at::Tensor f(at::Tensor x) { return at::cpu::cumsum(x, 1); }",
}


def escape_ext(key: str) -> str:
    """The load_inline call of ESCAPES[key], as a candidate file writes it."""
    return (f"load_inline(name='opsynth_verify_escape_{key}', cpp_sources={ATEN_HEADERS + ESCAPES[key]!r}, "
            "functions=['f'], no_implicit_headers=True, verbose=False)")

HEADER = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{imports}
EXT_SOURCE = {ext!r}
CUDA_EXT_SOURCE = {cuda_ext!r}
FUNCTIONS = {functions!r}
EXT_CPU = load_inline(name="opsynth_verify_suite", cpp_sources=EXT_SOURCE, functions=FUNCTIONS, verbose=False)
EXT_CUDA = None
if torch.cuda.is_available():
    EXT_CUDA = load_inline(name="opsynth_verify_suite_cuda", cpp_sources={decls!r}, cuda_sources=CUDA_EXT_SOURCE,
                           functions=FUNCTIONS, verbose=False)
{top}

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
{init}
    def forward(self, x):
        y = torch.addmm(self.lin.bias, x, self.lin.weight.t())  # a GEMM: allowed (cuBLAS/MKL)
        ext = EXT_CUDA if y.is_cuda else EXT_CPU
{forward}
'''


def render(forward: str, imports: str = "", top: str = "", init: str = "") -> str:
    """A candidate file: the shared extension, ModelNew with the task's weights, `forward`'s body after the GEMM."""
    ind = lambda s, k: "".join(" " * k + ln + "\n" for ln in s.strip("\n").splitlines())  # noqa: E731
    return HEADER.format(imports=imports, ext=EXT_SOURCE, cuda_ext=CUDA_EXT_SOURCE, functions=FUNCTIONS,
                         decls=CUDA_DECLS, top=top, init=ind(init, 8) if init else "",
                         forward=ind(forward, 8))


HONEST = render("return ext.relu_k(y)")

# relu(cumsum(x, 1)): cumsum is one of inductor's fallback operators, so the strict policy refuses a candidate that
# leaves it to PyTorch, and the library policy with aten::cumsum allowed takes it
CUMSUM_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(cumsum(x, 1))"""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(torch.cumsum(x, 1))


batch_size = 16
n = 256


def get_inputs():
    return [torch.randn(batch_size, n)]


def get_init_inputs():
    return []
'''
CUMSUM_HEADER = HEADER.split("\nclass ModelNew")[0] + '''
class ModelNew(nn.Module):
    def forward(self, x):
        ext = EXT_CUDA if x.is_cuda else EXT_CPU
{forward}
'''


def render_cumsum(forward: str, imports: str = "", top: str = "") -> str:
    """A candidate file for CUMSUM_TASK: the shared extension (its relu_k and cumsum_rows), `forward`'s body."""
    ind = lambda s, k: "".join(" " * k + ln + "\n" for ln in s.strip("\n").splitlines())  # noqa: E731
    return CUMSUM_HEADER.format(imports=imports, ext=EXT_SOURCE, cuda_ext=CUDA_EXT_SOURCE, functions=FUNCTIONS,
                                decls=CUDA_DECLS, top=top, forward=ind(forward, 8))


# the candidate's own kernels for both ops: strict
HONEST_CUMSUM = render_cumsum("return ext.relu_k(ext.cumsum_rows(x))")
# torch.cumsum for the hard part, its own relu: strict refuses it, library with aten::cumsum accepts it
LIBRARY_CUMSUM = render_cumsum("return ext.relu_k(torch.cumsum(x, 1))")


# route: (source, reason fragment of the catching check, checks off so that check is reached, device)
ROUTES: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "torch.*": (render("return torch.relu(y)"), "PyTorch compute", (), "cpu"),
    "F.*": (render("return F.relu(y)", imports="import torch.nn.functional as F"), "PyTorch compute", (), "cpu"),
    "Tensor method": (render("return y.relu()"), "PyTorch compute", (), "cpu"),
    "torch.ops.aten": (render("return torch.ops.aten.relu.default(y)"), "PyTorch compute", ("static",), "cpu"),
    "name bound before the guard": (render("return _relu(y)", imports="from torch import relu as _relu"),
                                    "PyTorch compute", (), "cpu"),
    "C++ calling at::relu": (render("return ATEN.f(y)", top=f"ATEN = {escape_ext('aten')}"), "PyTorch compute",
                             ("extension_symbols",), "cpu"),
    "torch.compile": (render("return ext.relu_k(y)", init="self.fast = torch.compile(lambda t: t)"),
                      "torch.compile", ("static",), "cpu"),
    "returns an input": (render("return x"), "shares storage",
                         (), "cpu"),
    "cache by shape": (render("k = tuple(x.shape)\nif k not in self.memo:\n    self.memo[k] = ext.relu_k(y)\n"
                              "return self.memo[k]", init="self.memo = {}"), "cached result", (), "cpu"),
    "cache by pointer": (render("k = x.data_ptr()\nif k not in self.memo:\n    self.memo[k] = ext.relu_k(y)\n"
                                "return self.memo[k]", init="self.memo = {}"), "cached result", (), "cpu"),
    "cache by data": (render("return ext.relu_cached(y)"), "cached result", (), "cpu"),
    # keyed by 8 sampled input values, returning a fresh copy: passes `repeat`; the timed runs' changed inputs catch it
    "cache_by_data": (render("k = tuple(x.reshape(-1)[::256].tolist())\nif k not in self.memo:\n"
                             "    self.memo[k] = ext.relu_k(y)\nreturn ext.relu_k(self.memo[k])", init="self.memo = {}"),
                      "timed output", (), "cpu"),
    # the guard lets a clone through (a copy computes nothing): a result cached by shape and returned as a fresh
    # clone passes `repeat`; the timed runs' changed inputs catch it
    "cache by shape, cloned": (render("k = tuple(x.shape)\nif k not in self.memo:\n    self.memo[k] = ext.relu_k(y)\n"
                                      "return self.memo[k].clone()", init="self.memo = {}"), "timed output", (), "cpu"),
    # each draw has a fresh instance: correct for an instance's first 3 calls (its draw and the repeat, or its draw
    # and the 2 warm-ups of timing), then a copy of its last output whatever the input
    "stale_after_warmup": (render("self.calls += 1\nif self.calls <= 3:\n    self.last = ext.relu_k(y)\n"
                                  "return ext.relu_k(self.last)", init="self.calls, self.last = 0, None"),
                           "timed output", (), "cpu"),
    "work after return (thread)": (render("out = torch.empty_like(y)\n"
                                          "threading.Thread(target=lambda: (time.sleep(0.02), out.copy_(ext.relu_k(y)))).start()\n"
                                          "return out", imports="import threading\nimport time"),
                                   "late writes", ("static",), "cpu"),
    "side stream": (render("s = torch.cuda.Stream()\nout = torch.empty_like(y)\nwith torch.cuda.stream(s):\n"
                           "    torch.cuda._sleep(10**7)\n    out.copy_(ext.relu_k(y))\nreturn out"),
                    "late writes", ("guard", "kernel_names"), "cuda"),
    "lower precision": (render("return ext.relu_bf16(y)"), "lower precision", (), "cpu"),
    "in-place input change": (render("r = ext.relu_k(y)\next.zero_(x)\nreturn r"), "in place", (), "cpu"),
    "reads the reference (gc)": (render("for o in gc.get_objects():\n"
                                        "    if type(o).__name__ == 'Model' and o is not self:\n"
                                        "        return o(x)\nreturn ext.relu_k(y)", imports="import gc"),
                                 "PyTorch compute", ("static",), "cpu"),
    "patched torch.cuda.synchronize": (render("return ext.relu_k(y)", top="torch.cuda.synchronize = lambda *a, **k: None"),
                                       "patched torch.cuda.synchronize", (), "cpu"),
    "patched timer": (render("return ext.relu_k(y)", imports="import time",
                             top="time.perf_counter = lambda: 0.0"), "patched time.perf_counter", ("static",), "cpu"),
    "os._exit": (render("os._exit(0)", imports="import os"), "without a verdict", ("static",), "cpu"),
    "forged verdict": (render("for fd in range(3, 4096):\n    try:\n        os.write(fd, b'{\"verdict\": "
                              "{\"correct\": true}}\\n')\n    except OSError:\n        pass\nreturn ext.relu_k(y)",
                              imports="import os"), "verdict channel", ("static",), "cpu"),
    "prints a fake result": (render("print('{\"correct\": true, \"reward\": 3}')\nreturn y"), "", (), "cpu"),
    # relu(cumsum(x, 1)) with cumsum left to PyTorch, by Python and by C++ past the Python dispatch key
    "torch.cumsum (a fallback op)": (LIBRARY_CUMSUM, "PyTorch compute in forward: aten::cumsum", (), "cpu"),
    "C++ past the Python key (ExcludeDispatchKeyGuard)": (
        render_cumsum("return ext.relu_k(ESC.f(x))", top=f"ESC = {escape_ext('exclude')}"), "imports PyTorch compute",
        (), "cpu"),
    "C++ past the Python key (dispatch-key TLS)": (
        render_cumsum("return ext.relu_k(ESC.f(x))", top=f"ESC = {escape_ext('tls')}"), "imports PyTorch compute",
        (), "cpu"),
    "C++ redispatch below the Python key": (
        render_cumsum("return ext.relu_k(ESC.f(x))", top=f"ESC = {escape_ext('redispatch')}"),
        "imports PyTorch compute", (), "cpu"),
    "C++ backend function (at::cpu::cumsum)": (
        render_cumsum("return ext.relu_k(ESC.f(x))", top=f"ESC = {escape_ext('backend')}"), "imports PyTorch compute",
        (), "cpu"),
    # on a GPU, the kernel names: the same escape with the extension layer off, caught by the kernels it launches
    "C++ past the Python key, by kernel name (CUDA)": (
        render_cumsum("return ext.relu_k(ESC.f(x))", top=f"ESC = {escape_ext('exclude')}"),
        "PyTorch kernels launched", ("extension_symbols",), "cuda"),
}
# the task of each route: the Linear -> relu suite task unless named here
TASKS = {"linear_relu": TASK, "cumsum_relu": CUMSUM_TASK}
CUMSUM_ROUTES = ("torch.cumsum (a fallback op)", "C++ past the Python key (ExcludeDispatchKeyGuard)",
                 "C++ past the Python key (dispatch-key TLS)", "C++ redispatch below the Python key",
                 "C++ backend function (at::cpu::cumsum)", "C++ past the Python key, by kernel name (CUDA)")
TASK_OF = {r: "cumsum_relu" if r in CUMSUM_ROUTES else "linear_relu" for r in ROUTES}
# the check each route's switch-off run turns off (the name `off` takes in verify())
CHECK_OF = {"PyTorch compute": "guard", "torch.compile": "compile_tripwire", "shares storage": "overlap",
            "cached result": "repeat", "threads": "late_writes", "late writes": "late_writes",
            "lower precision": "precision", "in place": "inplace", "patched": "identities",
            "timed output": "timed_outputs", "imports PyTorch compute": "extension_symbols",
            "PyTorch kernels launched": "kernel_names"}


def prebuild(escapes: bool = True) -> None:
    """Build the suite's extensions once into TORCH_EXTENSIONS_DIR (the CUDA one where a GPU is), so that each
    candidate only loads them; with `escapes`, the routes' own small extensions too, two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    import torch
    from torch.utils.cpp_extension import load_inline

    def escape(key: str) -> None:
        load_inline(name=f"opsynth_verify_escape_{key}", cpp_sources=ATEN_HEADERS + ESCAPES[key], functions=["f"],
                    no_implicit_headers=True, verbose=False)

    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(load_inline, name="opsynth_verify_suite", cpp_sources=EXT_SOURCE, functions=FUNCTIONS,
                            verbose=False)]
        jobs += [pool.submit(escape, k) for k in (ESCAPES if escapes else ())]
        for j in jobs:
            j.result()
    if torch.cuda.is_available():
        load_inline(name="opsynth_verify_suite_cuda", cpp_sources=CUDA_DECLS, cuda_sources=CUDA_EXT_SOURCE,
                    functions=FUNCTIONS, verbose=False)
