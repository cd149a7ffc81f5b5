"""The two layers behind the dispatch mode, unit-tested on recorded inputs: the libtorch symbols an extension imports
(demangled, as `nm -D --undefined-only | c++filt` prints them) and the kernel names a CUDA forward launches (as
torch.profiler names them on an H100). The routes that need them end to end are in the hack suite
(tests/verify/test_hack_suite.py) and, on a GPU, tests/verify/test_gpu_suite.py."""

import pytest

from verify.layers import classify_kernel, judge_kernels, judge_symbol
from verify.policy import make_policy

STRICT = make_policy()
CUMSUM = make_policy(allow=["aten::cumsum"])
OPS = frozenset({"cumsum", "relu", "add", "empty", "empty_like", "mm", "contiguous", "copy_", "clone"})

# an honest extension: torch::empty_like (its autograd-key guard included), data pointers, metadata, error reports
HONEST_SYMBOLS = [
    "at::_ops::empty_like::call(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, "
    "std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)",
    "at::_ops::empty::memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)",
    "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)",
    "at::_ops::copy_::call(at::Tensor&, at::Tensor const&, bool)",
    "c10::impl::ExcludeDispatchKeyGuard::ExcludeDispatchKeyGuard(c10::DispatchKeySet)",
    "at::TensorBase::__dispatch_contiguous(c10::MemoryFormat) const",
    "float* at::TensorBase::data_ptr<float>() const",
    "c10::detail::torchCheckFail(char const*, char const*, unsigned int, char const*)",
    "c10::cuda::getCurrentCUDAStream(signed char)",
    "at::cuda::getCurrentDeviceProperties()",
    "at::cuda::getCurrentCUDABlasHandle()",
    "c10::TensorImpl::decref_pyobject() const",
    "vtable for torch::autograd::AutogradMeta",
    "pybind11::detail::type_caster<at::Tensor, void>::load(pybind11::handle, bool)",
    "cudaLaunchKernel", "memcpy@GLIBC_2.14", "cublasSgemm_v2",
]
ESCAPE_SYMBOLS = {
    "at::_ops::cumsum::call(at::Tensor const&, long, std::optional<c10::ScalarType>)": "operator entry point",
    "at::_ops::relu::call(at::Tensor const&)": "operator entry point",
    "at::_ops::cumsum::redispatch(c10::DispatchKeySet, at::Tensor const&, long, std::optional<c10::ScalarType>)":
        "redispatch",
    "at::cpu::cumsum(at::Tensor const&, long, std::optional<c10::ScalarType>)": "backend kernel",
    "at::cuda::cumsum(at::Tensor const&, long, std::optional<c10::ScalarType>)": "backend kernel",
    "at::native::relu(at::Tensor const&)": "backend kernel",
    "at::native::structured_cumsum_out::impl(at::Tensor const&, long, std::optional<c10::ScalarType>, "
    "at::Tensor const&)": "backend kernel",
    "at::native::add_stub": "stub",
    "c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey, bool)": "dispatch-key state",
    "c10::impl::_force_tls_local_dispatch_key_set(c10::impl::PODLocalDispatchKeySet)": "dispatch-key state",
    "c10::Dispatcher::singleton()": "dispatcher",
    "c10::Dispatcher::findSchemaOrThrow(char const*, char const*)": "dispatcher",
    "c10::impl::TorchDispatchModeTLS::pop_stack()": "dispatch-mode state",
    "torch::jit::Operator::getOperation(torch::jit::Node const*) const": "TorchScript",
    "torch::autograd::VariableType::relu(c10::DispatchKeySet, at::Tensor const&)": "autograd kernel",
    "at::Context::setAllowTF32CuBLAS(bool)": "global state",
}


@pytest.mark.parametrize("sym", HONEST_SYMBOLS)
def test_allocation_metadata_data_pointers_and_gemm_pass(sym):
    assert judge_symbol(sym, STRICT, OPS) is None


@pytest.mark.parametrize("sym", list(ESCAPE_SYMBOLS))
def test_operator_entry_points_backends_and_dispatch_state_are_refused(sym):
    why = judge_symbol(sym, STRICT, OPS)
    assert why and ESCAPE_SYMBOLS[sym] in why, (sym, why)


def test_the_library_tier_takes_its_operators_through_the_dispatcher_only():
    call = "at::_ops::cumsum::call(at::Tensor const&, long, std::optional<c10::ScalarType>)"
    assert judge_symbol(call, CUMSUM, OPS) is None
    # past the dispatcher no guard lists it in library_calls, and a redispatch skips the Python key
    assert judge_symbol("at::cpu::cumsum(at::Tensor const&, long, std::optional<c10::ScalarType>)", CUMSUM, OPS)
    assert judge_symbol("at::_ops::cumsum::redispatch(c10::DispatchKeySet, at::Tensor const&, long, "
                        "std::optional<c10::ScalarType>)", CUMSUM, OPS)
    assert judge_symbol("at::_ops::relu::call(at::Tensor const&)", CUMSUM, OPS)


def test_the_layer_reads_a_real_extension(ext_dir):
    """The suite's shared extension imports nothing refused; a route's own one imports what it calls."""
    from pathlib import Path

    from verify.layers import imported_symbols, judge_object

    shared = next(Path(ext_dir).glob("opsynth_verify_suite/*.so"))
    syms = imported_symbols(str(shared))
    assert any("empty_like" in s for s in syms) and judge_object(str(shared), STRICT) == ([], [])
    backend = next(Path(ext_dir).glob("opsynth_verify_escape_backend/*.so"))
    assert judge_object(str(backend), STRICT)[0] == ["a backend kernel at::cpu::cumsum"]
    exclude = next(Path(ext_dir).glob("opsynth_verify_escape_exclude/*.so"))
    assert judge_object(str(exclude), CUMSUM) == ([], ["aten::cumsum"])  # library: listed for library_calls


# kernel names as torch.profiler reports them on an H100 (torch 2.x, CUDA 12)
TORCH_KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
    "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()"
    "() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
    "at::native::(anonymous namespace)::launch_clamp_scalar(...)::{lambda(float)#1}, std::array<char*, 2ul>)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, ...>)",
    "void at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::DeviceScanPolicy<float, std::plus<float> >"
    "::Policy900, float const*, float*, at_cuda_detail::cub::ScanTileState<float, true>, std::plus<float>, "
    "at_cuda_detail::cub::NullType, unsigned int, float, false>(...)",
    "void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float> >(float*, float const*, unsigned "
    "int, unsigned int, unsigned int, float, std::plus<float>)",
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, "
    "int, int, int, bool const*, int, bool)",
    "void cunn_SoftMaxForward<4, float, float, float, Epilogue>(float*, float const*, int)",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
    "true, 64, 64, 64, true, true>::Params)",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t, "
    "Flash_kernel_traits<64, 128, 128, 4, cutlass::half_t> >, false, false, false, false, true, true, false, "
    "false>(pytorch_flash::Flash_fwd_params)",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>"
    ", unsigned int, 2, 128, 1>(...)",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float "
    "const*, float const*, float const*, float*, float*, float*)",
]
GEMM_CONV_KERNELS = [
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
    "5x_cublas",
    "nvjet_tst_128x64_64x8_2x1_v_bz_coopB_NNT",
    "ampere_sgemm_128x64_tn",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_"
    "128x128_16x4_nn_align4::Params)",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
    "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float "
    "const>, cublasGemvTensorStridedBatched<float>, float> >(...)",
    "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>"
    ", float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, void*, "
    "long, float*, int*)",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2"
    "x1_g1_tensor16x8x8_kernel_cudnn",
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float "
    "const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float "
    "const*, float const*, bool, int, int)",
    "void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, 0, 0, int, float, float, float, float"
    ", float, float>(cudnn::cnn::GroupedDirectFpropParams, float const*, float const*, float*, float, float, float "
    "const*, float const*, float const*, cudnnActivationStruct)",
    "void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int, float "
    "const*, float*, float, float)",
]
OWN_KERNELS = [
    "relu_kernel(float const*, float*, long)", "fused_gelu_bias_kernel", "triton_poi_fused_add_relu_0",
    "triton_per_fused__softmax_0", "_layernorm_fwd_kernel", "reduce_kernel", "cumsum_kernel",
    "void my_scale<c10::Half>(c10::Half const*, c10::Half*, long)", "rms_norm_kernel",
]


@pytest.mark.parametrize("name", TORCH_KERNELS)
def test_libtorch_kernels_are_pytorch_compute(name):
    assert classify_kernel(name) == "torch"
    assert judge_kernels([(name, [])], STRICT) != []  # launched past the dispatcher: nothing allowed it


@pytest.mark.parametrize("name", GEMM_CONV_KERNELS)
def test_cublas_cudnn_and_cutlass_kernels_are_gemm_and_convolution(name):
    assert classify_kernel(name) == "gemm_conv" and judge_kernels([(name, [])], STRICT) == []


@pytest.mark.parametrize("name", OWN_KERNELS)
def test_the_candidates_own_kernels_are_its_own(name):
    assert classify_kernel(name) == "own" and judge_kernels([(name, [])], STRICT) == []


@pytest.mark.parametrize("name", [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, "
    "at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_"
    "cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)"
    "#1}>(at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)",
])
def test_libtorch_fills_and_copies_pass_even_untied_to_their_operator(name):
    assert classify_kernel(name) == "torch" and judge_kernels([(name, [])], STRICT) == []


def test_a_libtorch_kernel_passes_under_an_operator_the_policy_allows():
    scan, bias = TORCH_KERNELS[2], TORCH_KERNELS[0]
    assert judge_kernels([(scan, ["aten::cumsum"])], STRICT) != []
    assert judge_kernels([(scan, ["aten::cumsum"])], CUMSUM) == []
    # the bias add inside a convolution, a copy or a fill: the operator that launched it is allowed
    assert judge_kernels([(bias, ["aten::add_", "aten::convolution"])], STRICT) == []
    assert judge_kernels([(bias, ["aten::copy_"])], STRICT) == []
    assert judge_kernels([(bias, ["aten::relu"])], STRICT) != []


@pytest.mark.gpu
def test_profile_kernels_sees_a_libtorch_kernel_and_its_operator():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from verify.layers import profile_kernels

    x = torch.randn(64, 256, device="cuda")
    ks = profile_kernels(lambda: torch.cumsum(x, 1), torch.cuda.synchronize)
    assert any(classify_kernel(n) == "torch" and "aten::cumsum" in ops for n, ops in ks), ks
    assert judge_kernels(ks, STRICT) and not judge_kernels(ks, CUMSUM)
