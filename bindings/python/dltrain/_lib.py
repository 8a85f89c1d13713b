"""Loading libdltrain and declaring its C functions for ctypes.

The library is found, in this order:
  1. the path in the DLTRAIN_LIBRARY environment variable (nothing else is tried when it is
     set: a wrong path is an error, not a reason to pick up some other copy);
  2. libdltrain.so.1 next to this package, the copy a wheel bundles (`pip install
     ./bindings/python` builds and includes it), so an installed wheel needs nothing else;
  3. its SONAME, libdltrain.so.1, through the dynamic loader's search path (LD_LIBRARY_PATH,
     the ld.so cache, RUNPATH): an installed library of this ABI generation;
  4. ctypes.util.find_library("dltrain");
  5. libdltrain.so (a development symlink).
The loaded library must report dlt_abi_version() == ABI_VERSION, or importing dltrain raises
ImportError naming both numbers.

Every function of the public headers is listed in _SIGNATURES with its exact C types
(int32_t -> c_int32, int64_t -> c_int64, size_t -> c_size_t, double -> c_double, handles and
untyped buffers -> c_void_p). tests/test_abi.py checks this table against include/dltrain/*.h.
A function the loaded library does not export (a part not built yet, or an older minor
release) is replaced by a stub that raises NotImplementedError when called, so the rest of
the binding keeps working. Every declared function is called through _guard.wrap (integer
arguments checked against their C type's range, one thread per context at a time).
"""

import ctypes
import ctypes.util
import os

from . import errors
from ._guard import wrap as _wrap

#: ABI generation this binding speaks (DLT_ABI_VERSION, the SONAME number).
ABI_VERSION = 1

# ---- C types, named as in the headers --------------------------------------------------
I32 = ctypes.c_int32
I64 = ctypes.c_int64
U32 = ctypes.c_uint32
U64 = ctypes.c_uint64
SIZE = ctypes.c_size_t
F64 = ctypes.c_double
PTR = ctypes.c_void_p  # opaque handle or untyped buffer
STR = ctypes.c_char_p  # const char * (in) / char * buffer
STATUS = I32  # dlt_status
P = ctypes.POINTER

#: C callback types. Instances must be kept alive as long as the library may call them.
LOG_FN = ctypes.CFUNCTYPE(None, I32, STR, PTR)  # dlt_log_fn
STEP_FN = ctypes.CFUNCTYPE(STATUS, PTR)  # dlt_step_fn
# nn: a custom module's forward (m, user, inputs, n_inputs, outputs, n_outputs) and the
# destroy callback of its user pointer.
MODULE_FORWARD_FN = ctypes.CFUNCTYPE(STATUS, PTR, PTR, P(PTR), I32, P(PTR), I32)  # dlt_module_forward_fn
USER_DESTROY_FN = ctypes.CFUNCTYPE(None, PTR)  # dlt_user_destroy_fn

# name: (restype, [argtypes]). Grouped by header, in header order.
_SIGNATURES = {
    # ---- core.h
    "dlt_version": (U32, []),
    "dlt_abi_version": (U32, []),
    "dlt_version_string": (STR, []),
    "dlt_built_with_cuda": (I32, []),
    "dlt_status_string": (STR, [STATUS]),
    "dlt_last_error": (STR, []),
    "dlt_last_error_code": (STATUS, []),
    "dlt_last_error_copy": (SIZE, [STR, SIZE]),
    "dlt_clear_error": (None, []),
    "dlt_set_error": (STATUS, [STATUS, STR]),
    "dlt_set_log_callback": (None, [LOG_FN, PTR]),
    "dlt_cuda_device_count": (STATUS, [P(I32)]),
    "dlt_ctx_create": (STATUS, [I32, I32, U32, P(PTR)]),
    "dlt_ctx_destroy": (None, [PTR]),
    "dlt_ctx_device_type": (I32, [PTR]),
    "dlt_ctx_device_index": (I32, [PTR]),
    "dlt_ctx_device_name": (STATUS, [PTR, STR, SIZE]),
    "dlt_ctx_synchronize": (STATUS, [PTR]),
    "dlt_ctx_wait_plans": (STATUS, [PTR]),
    "dlt_ctx_check": (STATUS, [PTR]),
    "dlt_ctx_set_seed": (STATUS, [PTR, U64]),
    "dlt_ctx_get_seed": (STATUS, [PTR, P(U64), P(U64)]),
    # gptex (issue 17): the generator's whole state (exact resumes)
    "dlt_ctx_get_rng_state": (STATUS, [PTR, P(U64), P(U64)]),
    "dlt_ctx_set_rng_state": (STATUS, [PTR, U64, U64]),
    "dlt_ctx_set_deterministic": (STATUS, [PTR, I32]),
    "dlt_ctx_set_allow_tf32": (STATUS, [PTR, I32]),
    "dlt_set_num_threads": (STATUS, [I32]),
    "dlt_get_num_threads": (I32, []),
    # flash (issue 18): tensor-core attention switch (torch.backends.cuda.enable_flash_sdp)
    "dlt_ctx_set_flash_sdp": (STATUS, [PTR, I32]),
    "dlt_ctx_flash_sdp_enabled": (STATUS, [PTR, P(I32)]),
    "dlt_ctx_set_cudnn_sdp": (STATUS, [PTR, I32]),
    "dlt_ctx_cudnn_sdp_enabled": (STATUS, [PTR, P(I32)]),
    "dlt_ctx_set_cudnn_benchmark": (STATUS, [PTR, I32]),
    "dlt_ctx_cudnn_benchmark_enabled": (STATUS, [PTR, P(I32)]),
    "dlt_memory_stat": (STATUS, [PTR, I32, P(U64)]),
    "dlt_memory_reset_peak": (STATUS, [PTR]),
    "dlt_empty_cache": (STATUS, [PTR]),
    "dlt_event_create": (STATUS, [PTR, P(PTR)]),
    "dlt_event_destroy": (None, [PTR]),
    "dlt_event_record": (STATUS, [PTR]),
    "dlt_event_elapsed_ms": (STATUS, [PTR, PTR, P(F64)]),
    "dlt_range_push": (STATUS, [PTR, STR]),
    "dlt_range_pop": (STATUS, [PTR]),
    "dlt_testing_fail_alloc": (STATUS, [PTR, I64]),
    "dlt_testing_alloc_count": (STATUS, [PTR, P(I64)]),
    "dlt_testing_fail_write": (STATUS, [I64]),
    # ---- tensor.h
    "dlt_dtype_size": (SIZE, [I32]),
    "dlt_dtype_name": (STR, [I32]),
    "dlt_tensor_empty": (STATUS, [PTR, I32, P(I64), I32, I32, P(PTR)]),
    "dlt_tensor_zeros": (STATUS, [PTR, I32, P(I64), I32, I32, P(PTR)]),
    "dlt_tensor_from_host": (STATUS, [PTR, I32, P(I64), I32, I32, PTR, SIZE, P(PTR)]),
    "dlt_tensor_retain": (PTR, [PTR]),
    "dlt_tensor_release": (None, [PTR]),
    "dlt_tensor_ndim": (I32, [PTR]),
    "dlt_tensor_dim": (I64, [PTR, I32]),
    "dlt_tensor_numel": (I64, [PTR]),
    "dlt_tensor_nbytes": (SIZE, [PTR]),
    "dlt_tensor_dtype": (I32, [PTR]),
    "dlt_tensor_format": (I32, [PTR]),
    "dlt_tensor_device_type": (I32, [PTR]),
    "dlt_tensor_ctx": (PTR, [PTR]),
    "dlt_tensor_shape": (I32, [PTR, P(I64), I32]),
    "dlt_tensor_copy_to_host": (STATUS, [PTR, PTR, SIZE]),
    "dlt_tensor_copy_from_host": (STATUS, [PTR, PTR, SIZE]),
    "dlt_tensor_copy": (STATUS, [PTR, PTR]),
    "dlt_tensor_to_ctx": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_tensor_cast": (STATUS, [PTR, I32, P(PTR)]),
    "dlt_tensor_to_format": (STATUS, [PTR, I32, P(PTR)]),
    "dlt_tensor_fill": (STATUS, [PTR, F64]),
    "dlt_tensor_rand_uniform": (STATUS, [PTR, F64, F64]),
    "dlt_tensor_rand_normal": (STATUS, [PTR, F64, F64]),
    "dlt_tensor_get": (STATUS, [PTR, I64, P(F64)]),
    "dlt_tensor_item": (STATUS, [PTR, P(F64)]),
    "dlt_tensor_set_requires_grad": (STATUS, [PTR, I32]),
    "dlt_tensor_requires_grad": (I32, [PTR]),
    "dlt_tensor_grad": (PTR, [PTR]),
    # build: printing
    "dlt_tensor_snprint": (STATUS, [PTR, STR, SIZE, P(SIZE)]),
    # ---- ops.h
    "dlt_conv2d": (STATUS, [PTR, PTR, PTR, I64, I64, I64, I64, I64, I64, I64, P(PTR)]),
    "dlt_batch_norm2d": (STATUS, [PTR, PTR, PTR, PTR, PTR, I32, F64, F64, P(PTR)]),
    "dlt_batch_norm2d_act": (STATUS, [PTR, PTR, I32, PTR, PTR, PTR, PTR, I32, F64, F64, P(PTR)]),
    "dlt_relu": (STATUS, [PTR, P(PTR)]),
    "dlt_max_pool2d": (STATUS, [PTR, I64, I64, I64, I64, I64, I64, P(PTR)]),
    "dlt_global_avg_pool2d": (STATUS, [PTR, P(PTR)]),
    "dlt_linear": (STATUS, [PTR, PTR, PTR, P(PTR)]),
    "dlt_add": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_mul_scalar": (STATUS, [PTR, PTR, F64, P(PTR)]),
    "dlt_sum": (STATUS, [PTR, P(PTR)]),
    "dlt_mean": (STATUS, [PTR, P(PTR)]),
    "dlt_reshape": (STATUS, [PTR, P(I64), I32, P(PTR)]),
    "dlt_flatten": (STATUS, [PTR, I32, I32, P(PTR)]),
    "dlt_cast": (STATUS, [PTR, I32, P(PTR)]),
    "dlt_cross_entropy": (STATUS, [PTR, PTR, I64, I32, P(PTR)]),
    "dlt_sub": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_mul": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_div": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_cross_entropy_ex": (STATUS, [PTR, PTR, I64, I32, F64, P(PTR)]),
    "dlt_mse_loss": (STATUS, [PTR, PTR, I32, P(PTR)]),
    "dlt_binary_cross_entropy_with_logits": (STATUS, [PTR, PTR, PTR, PTR, I32, P(PTR)]),
    "dlt_neg": (STATUS, [PTR, P(PTR)]),
    "dlt_exp": (STATUS, [PTR, P(PTR)]),
    "dlt_log": (STATUS, [PTR, P(PTR)]),
    "dlt_sqrt": (STATUS, [PTR, P(PTR)]),
    "dlt_rsqrt": (STATUS, [PTR, P(PTR)]),
    "dlt_abs": (STATUS, [PTR, P(PTR)]),
    "dlt_pow_scalar": (STATUS, [PTR, F64, P(PTR)]),
    "dlt_add_scalar": (STATUS, [PTR, F64, P(PTR)]),
    "dlt_gelu": (STATUS, [PTR, I32, P(PTR)]),
    "dlt_silu": (STATUS, [PTR, P(PTR)]),
    "dlt_sigmoid": (STATUS, [PTR, P(PTR)]),
    "dlt_tanh": (STATUS, [PTR, P(PTR)]),
    "dlt_softplus": (STATUS, [PTR, P(PTR)]),
    "dlt_leaky_relu": (STATUS, [PTR, F64, P(PTR)]),
    "dlt_sum_dims": (STATUS, [PTR, P(I32), I32, I32, P(PTR)]),
    "dlt_mean_dims": (STATUS, [PTR, P(I32), I32, I32, P(PTR)]),
    "dlt_amax": (STATUS, [PTR, P(I32), I32, I32, P(PTR)]),
    "dlt_argmax": (STATUS, [PTR, I32, I32, P(PTR)]),
    "dlt_softmax": (STATUS, [PTR, I32, P(PTR)]),
    "dlt_log_softmax": (STATUS, [PTR, I32, P(PTR)]),
    "dlt_layer_norm": (STATUS, [PTR, P(I64), I32, PTR, PTR, F64, P(PTR)]),
    "dlt_layer_norm_to": (STATUS, [PTR, P(I64), I32, PTR, PTR, F64, I32, P(PTR)]),
    "dlt_add_layer_norm": (STATUS, [PTR, PTR, P(I64), I32, PTR, PTR, F64, I32, P(PTR), P(PTR)]),
    "dlt_dropout": (STATUS, [PTR, F64, I32, P(PTR)]),
    "dlt_embedding": (STATUS, [PTR, PTR, I64, P(PTR)]),
    "dlt_scaled_dot_product_attention": (STATUS, [PTR, PTR, PTR, I32, F64, F64, P(PTR)]),
    "dlt_scaled_dot_product_attention_qkvpacked": (STATUS, [PTR, I64, I32, F64, F64, P(PTR)]),
    "dlt_matmul": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_bmm": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_transpose": (STATUS, [PTR, I32, I32, P(PTR)]),
    "dlt_permute": (STATUS, [PTR, P(I32), I32, P(PTR)]),
    "dlt_narrow": (STATUS, [PTR, I32, I64, I64, P(PTR)]),
    "dlt_split": (STATUS, [PTR, I64, I32, P(PTR), I32, P(I32)]),
    "dlt_cat": (STATUS, [P(PTR), I32, I32, P(PTR)]),
    "dlt_contiguous": (STATUS, [PTR, P(PTR)]),
    "dlt_expand": (STATUS, [PTR, P(I64), I32, P(PTR)]),
    # ---- autograd.h
    "dlt_backward": (STATUS, [PTR, PTR]),
    "dlt_zero_grad": (STATUS, [P(PTR), I32, I32]),
    "dlt_grad_set_enabled": (STATUS, [PTR, I32, P(I32)]),
    "dlt_grad_is_enabled": (I32, [PTR]),
    "dlt_tape_live_nodes": (STATUS, [PTR, P(I64)]),
    "dlt_tape_clear": (STATUS, [PTR]),
    "dlt_tensor_detach": (STATUS, [PTR, P(PTR)]),
    # ---- nn.h
    "dlt_module_destroy": (None, [PTR]),
    "dlt_module_forward": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_module_set_training": (STATUS, [PTR, I32]),
    "dlt_module_is_training": (I32, [PTR]),
    "dlt_module_kind": (STR, [PTR]),
    "dlt_module_num_state": (I32, [PTR]),
    "dlt_module_state_entry": (STATUS, [PTR, I32, P(STR), P(PTR), P(I32)]),
    "dlt_module_find": (STATUS, [PTR, STR, P(PTR)]),
    "dlt_module_num_params": (I32, [PTR]),
    "dlt_module_params": (STATUS, [PTR, P(PTR), I32, P(I32)]),
    "dlt_module_param_count": (I64, [PTR]),
    "dlt_module_set_format": (STATUS, [PTR, I32]),
    "dlt_conv2d_create": (STATUS, [PTR, I64, I64, I64, I64, I64, I64, I64, I64, I32, P(PTR)]),
    "dlt_batchnorm2d_create": (STATUS, [PTR, I64, F64, F64, P(PTR)]),
    "dlt_linear_create": (STATUS, [PTR, I64, I64, I32, P(PTR)]),
    "dlt_relu_create": (STATUS, [PTR, P(PTR)]),
    "dlt_max_pool2d_create": (STATUS, [PTR, I64, I64, I64, P(PTR)]),
    "dlt_global_avg_pool2d_create": (STATUS, [PTR, P(PTR)]),
    "dlt_flatten_create": (STATUS, [PTR, P(PTR)]),
    "dlt_sequential_create": (STATUS, [PTR, P(PTR)]),
    "dlt_sequential_append": (STATUS, [PTR, STR, PTR]),
    "dlt_basic_block_create": (STATUS, [PTR, I64, I64, I64, P(PTR)]),
    "dlt_bottleneck_create": (STATUS, [PTR, I64, I64, I64, P(PTR)]),
    "dlt_resnet_create": (STATUS, [PTR, I32, I64, P(PTR)]),
    "dlt_resnet50_create": (STATUS, [PTR, I64, P(PTR)]),
    # nn: option structs (passed as pointers), custom modules, tree queries, summary
    "dlt_conv2d_options_init": (None, [PTR, U32]),
    "dlt_conv2d_create_ex": (STATUS, [PTR, I64, I64, I64, I64, PTR, P(PTR)]),
    "dlt_batchnorm2d_options_init": (None, [PTR, U32]),
    "dlt_batchnorm2d_create_ex": (STATUS, [PTR, I64, PTR, P(PTR)]),
    "dlt_linear_options_init": (None, [PTR, U32]),
    "dlt_linear_create_ex": (STATUS, [PTR, I64, I64, PTR, P(PTR)]),
    "dlt_custom_module_create": (STATUS, [PTR, STR, MODULE_FORWARD_FN, PTR, USER_DESTROY_FN, P(PTR)]),
    "dlt_module_user_data": (PTR, [PTR]),
    "dlt_module_register_parameter": (STATUS, [PTR, STR, PTR]),
    "dlt_module_register_buffer": (STATUS, [PTR, STR, PTR]),
    "dlt_module_register_module": (STATUS, [PTR, STR, PTR]),
    "dlt_module_ctx": (PTR, [PTR]),
    "dlt_module_num_children": (I32, [PTR]),
    "dlt_module_child": (STATUS, [PTR, I32, P(STR), P(PTR)]),
    "dlt_module_get_submodule": (STATUS, [PTR, STR, P(PTR)]),
    "dlt_module_forward_ex": (STATUS, [PTR, P(PTR), I32, P(PTR), I32]),
    "dlt_module_summary": (STATUS, [PTR, STR, SIZE, P(SIZE)]),
    "dlt_embedding_create": (STATUS, [PTR, I64, I64, I64, P(PTR)]),
    "dlt_layernorm_create": (STATUS, [PTR, I64, F64, I32, I32, P(PTR)]),
    "dlt_dropout_create": (STATUS, [PTR, F64, P(PTR)]),
    "dlt_gelu_create": (STATUS, [PTR, I32, P(PTR)]),
    # ---- gpt.h
    "dlt_gpt_config_init": (None, [PTR, U32]),
    "dlt_gpt_config_preset_init": (STATUS, [STR, PTR, U32]),
    "dlt_gpt_create": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_gpt_get_config": (STATUS, [PTR, PTR]),
    "dlt_gpt_forward": (STATUS, [PTR, PTR, PTR, P(PTR), P(PTR)]),
    "dlt_gpt_generate": (STATUS, [PTR, P(I64), I64, I64, F64, I32, U64, P(I64)]),
    "dlt_gpt_load_hf": (STATUS, [PTR, STR]),
    "dlt_gpt_save_hf": (STATUS, [PTR, STR]),
    "dlt_gpt_from_hf": (STATUS, [PTR, STR, P(PTR)]),
    # ---- optim.h
    "dlt_sgd_create": (STATUS, [P(PTR), I32, F64, F64, F64, F64, I32, I32, P(PTR)]),
    "dlt_optimizer_destroy": (None, [PTR]),
    "dlt_optimizer_step": (STATUS, [PTR]),
    "dlt_optimizer_zero_grad": (STATUS, [PTR, I32]),
    "dlt_optimizer_set_lr": (STATUS, [PTR, F64]),
    "dlt_optimizer_get_lr": (STATUS, [PTR, P(F64)]),
    "dlt_optimizer_step_count": (STATUS, [PTR, P(I64)]),
    "dlt_optimizer_last_step_applied": (STATUS, [PTR, P(I32)]),
    "dlt_optimizer_num_params": (I32, [PTR]),
    "dlt_optimizer_param": (PTR, [PTR, I32]),
    "dlt_optimizer_momentum_buffer": (PTR, [PTR, I32]),
    "dlt_sgd_get_options": (STATUS, [PTR, P(F64), P(F64), P(F64), P(I32), P(I32)]),
    "dlt_lr_schedule_step": (STATUS, [PTR, I64, F64]),
    "dlt_lr_schedule_multistep": (STATUS, [PTR, P(I64), I32, F64]),
    "dlt_lr_schedule_cosine": (STATUS, [PTR, I64, F64]),
    "dlt_lr_schedule_warmup": (STATUS, [PTR, I64, F64]),
    "dlt_lr_schedule_clear": (STATUS, [PTR]),
    # optim.h (optim): option structs (passed as byref(ctypes.Structure), see optim.py),
    # Adam/AdamW, parameter groups, clip_grad_norm, nanoGPT and constant schedules
    "dlt_sgd_options_init": (None, [PTR, U32]),
    "dlt_sgd_create_ex": (STATUS, [P(PTR), I32, PTR, P(PTR)]),
    "dlt_adamw_options_init": (None, [PTR, U32]),
    "dlt_adam_options_init": (None, [PTR, U32]),
    "dlt_adamw_create_ex": (STATUS, [P(PTR), I32, PTR, P(PTR)]),
    "dlt_adamw_get_options": (STATUS, [PTR, PTR]),
    "dlt_optimizer_exp_avg": (PTR, [PTR, I32]),
    "dlt_optimizer_exp_avg_sq": (PTR, [PTR, I32]),
    "dlt_optimizer_param_step": (STATUS, [PTR, I32, P(I64)]),
    "dlt_optimizer_kind": (STR, [PTR]),
    "dlt_optimizer_add_param_group": (STATUS, [PTR, P(PTR), I32, F64, F64]),
    "dlt_optimizer_num_param_groups": (I32, [PTR]),
    "dlt_optimizer_param_group_of": (I32, [PTR, I32]),
    "dlt_optimizer_set_group_lr": (STATUS, [PTR, I32, F64]),
    "dlt_optimizer_get_group_lr": (STATUS, [PTR, I32, P(F64)]),
    "dlt_optimizer_set_group_weight_decay": (STATUS, [PTR, I32, F64]),
    "dlt_optimizer_get_group_weight_decay": (STATUS, [PTR, I32, P(F64)]),
    "dlt_clip_grad_norm": (STATUS, [P(PTR), I32, F64, F64, P(PTR)]),
    "dlt_grad_norm": (STATUS, [P(PTR), I32, F64, P(PTR)]),
    "dlt_optimizer_set_clip_grad_norm": (STATUS, [PTR, F64, F64]),
    "dlt_optimizer_clear_clip_grad_norm": (STATUS, [PTR]),
    "dlt_optimizer_grad_norm": (STATUS, [PTR, P(PTR)]),
    "dlt_lr_schedule_warmup_cosine": (STATUS, [PTR, I64, I64, F64]),
    "dlt_lr_schedule_constant": (STATUS, [PTR, F64, I64]),
    # ---- amp.h
    "dlt_autocast_begin": (STATUS, [PTR, I32]),
    "dlt_autocast_end": (STATUS, [PTR]),
    "dlt_autocast_dtype": (I32, [PTR]),
    "dlt_grad_scaler_create": (STATUS, [PTR, F64, F64, F64, I32, I32, P(PTR)]),
    "dlt_grad_scaler_destroy": (None, [PTR]),
    "dlt_grad_scaler_is_enabled": (I32, [PTR]),
    "dlt_grad_scaler_scale": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_grad_scaler_unscale": (STATUS, [PTR, PTR]),
    "dlt_grad_scaler_step": (STATUS, [PTR, PTR]),
    "dlt_grad_scaler_update": (STATUS, [PTR]),
    "dlt_grad_scaler_update_to": (STATUS, [PTR, F64]),
    "dlt_grad_scaler_get_scale": (STATUS, [PTR, P(F64)]),
    "dlt_grad_scaler_scale_tensor": (PTR, [PTR]),
    "dlt_grad_scaler_found_inf": (STATUS, [PTR, PTR, P(I32)]),
    "dlt_grad_scaler_get_state": (STATUS, [PTR, P(F64), P(F64), P(F64), P(I32), P(I32)]),
    "dlt_grad_scaler_set_state": (STATUS, [PTR, F64, F64, F64, I32, I32]),
    # ---- data.h
    "dlt_cifar10_open": (STATUS, [PTR, STR, I32, P(PTR)]),
    "dlt_cifar10_open_file": (STATUS, [PTR, STR, P(PTR)]),
    "dlt_synthetic_dataset_create": (STATUS, [PTR, I64, I32, U64, I32, P(PTR)]),
    "dlt_dataset_destroy": (None, [PTR]),
    "dlt_dataset_size": (I64, [PTR]),
    "dlt_dataset_num_classes": (I32, [PTR]),
    "dlt_dataset_get": (STATUS, [PTR, I64, PTR, SIZE, P(I32)]),
    "dlt_dataset_class_name": (STR, [PTR, I32]),
    "dlt_loader_create": (STATUS, [PTR, I64, I32, I32, U64, P(PTR)]),
    "dlt_loader_destroy": (None, [PTR]),
    "dlt_loader_set_output": (STATUS, [PTR, I32, I32, I32]),
    "dlt_loader_set_normalize": (STATUS, [PTR, P(ctypes.c_float), P(ctypes.c_float)]),
    "dlt_loader_set_augment": (STATUS, [PTR, I32, I32]),
    "dlt_loader_start_epoch": (STATUS, [PTR, I64]),
    "dlt_loader_next": (STATUS, [PTR, P(PTR), P(PTR), P(I32)]),
    "dlt_loader_seek": (STATUS, [PTR, I64]),
    "dlt_loader_position": (I64, [PTR]),
    "dlt_loader_num_batches": (I64, [PTR]),
    "dlt_loader_batch_size": (I64, [PTR]),
    "dlt_loader_epoch_order": (STATUS, [PTR, I64, P(I64), I64]),
    "dlt_evaluate_accuracy": (STATUS, [PTR, PTR, P(F64)]),
    # data.h: datasets over tensors and record files, token data (engineer "data")
    "dlt_tensor_dataset_options_init": (None, [PTR, U32]),
    "dlt_tensor_dataset_create": (STATUS, [PTR, PTR, PTR, P(PTR)]),
    "dlt_record_file_options_init": (None, [PTR, U32]),
    "dlt_record_files_open": (STATUS, [PTR, P(STR), I32, PTR, P(PTR)]),
    "dlt_dataset_sample_shape": (I32, [PTR, P(I64), I32]),
    "dlt_dataset_dtype": (I32, [PTR]),
    "dlt_dataset_sample_bytes": (SIZE, [PTR]),
    "dlt_dataset_is_image": (I32, [PTR]),
    "dlt_token_file_open": (STATUS, [PTR, STR, I32, I32, P(PTR)]),
    "dlt_token_dataset_create": (STATUS, [PTR, P(ctypes.c_uint16), I64, I32, P(PTR)]),
    "dlt_synthetic_tokens_create": (STATUS, [PTR, I64, I32, U64, P(PTR)]),
    "dlt_token_dataset_destroy": (None, [PTR]),
    "dlt_token_dataset_size": (I64, [PTR]),
    "dlt_token_dataset_vocab_size": (I32, [PTR]),
    "dlt_token_dataset_read": (STATUS, [PTR, I64, I64, P(ctypes.c_uint16)]),
    "dlt_token_loader_create": (STATUS, [PTR, I64, I64, U64, P(PTR)]),
    "dlt_token_loader_destroy": (None, [PTR]),
    "dlt_token_loader_set_output": (STATUS, [PTR, I32]),
    "dlt_token_loader_next": (STATUS, [PTR, P(PTR), P(PTR)]),
    "dlt_token_loader_seek": (STATUS, [PTR, I64]),
    "dlt_token_loader_position": (STATUS, [PTR, P(I64)]),
    "dlt_token_loader_offsets": (STATUS, [PTR, I64, P(I64), I64]),
    "dlt_char_tokenizer_create": (STATUS, [STR, SIZE, P(PTR)]),
    "dlt_char_tokenizer_from_file": (STATUS, [STR, P(PTR)]),
    "dlt_char_tokenizer_destroy": (None, [PTR]),
    "dlt_char_tokenizer_vocab_size": (I32, [PTR]),
    "dlt_char_tokenizer_itos": (I32, [PTR, I32]),
    "dlt_char_tokenizer_stoi": (I32, [PTR, I32]),
    "dlt_char_tokenizer_encode": (STATUS, [PTR, STR, SIZE, P(ctypes.c_uint16), I64, P(I64)]),
    "dlt_char_tokenizer_decode": (STATUS, [PTR, P(ctypes.c_uint16), I64, STR, SIZE, P(SIZE)]),
    "dlt_char_text_open": (STATUS, [PTR, STR, F64, P(PTR), P(PTR), P(PTR)]),
    # ---- io.h
    "dlt_module_save": (STATUS, [PTR, STR]),
    "dlt_module_load": (STATUS, [PTR, STR]),
    "dlt_checkpoint_save": (STATUS, [STR, PTR, PTR, PTR, I64, I64]),
    "dlt_checkpoint_load": (STATUS, [STR, PTR, PTR, PTR, P(I64), P(I64)]),
    # gptex (issue 17): a program's own train.* entries in a checkpoint
    "dlt_checkpoint_save_ex": (STATUS, [STR, PTR, PTR, PTR, I64, I64, P(STR), P(PTR), I32]),
    "dlt_safetensors_save": (STATUS, [STR, P(STR), P(PTR), I32]),
    "dlt_safetensors_load_tensor": (STATUS, [PTR, STR, STR, P(PTR)]),
    # io.h, harden (issue 19): the file handle, non-strict and filtered loads
    "dlt_safetensors_open": (STATUS, [STR, P(PTR)]),
    "dlt_safetensors_close": (None, [PTR]),
    "dlt_safetensors_num_tensors": (I32, [PTR]),
    "dlt_safetensors_name": (STR, [PTR, I32]),
    "dlt_safetensors_info": (STATUS, [PTR, STR, P(I32), P(I64), I32, P(I32)]),
    "dlt_safetensors_dtype_name": (STR, [PTR, STR]),
    "dlt_safetensors_metadata": (STR, [PTR, STR]),
    "dlt_safetensors_get": (STATUS, [PTR, PTR, STR, P(PTR)]),
    "dlt_module_load_options_init": (None, [PTR, U32]),
    "dlt_module_load_ex": (STATUS, [PTR, STR, PTR, P(PTR)]),
    "dlt_module_load_safetensors": (STATUS, [PTR, PTR, PTR, P(PTR)]),
    "dlt_load_report_count": (I32, [PTR, I32]),
    "dlt_load_report_name": (STR, [PTR, I32, I32]),
    "dlt_load_report_num_loaded": (I32, [PTR]),
    "dlt_load_report_destroy": (None, [PTR]),
    # ---- graph.h
    "dlt_graph_create": (STATUS, [PTR, STEP_FN, PTR, I32, P(PTR)]),
    "dlt_graph_run": (STATUS, [PTR]),
    "dlt_graph_is_captured": (I32, [PTR]),
    "dlt_graph_num_nodes": (I64, [PTR]),
    "dlt_graph_stat": (I64, [PTR, I32]),
    "dlt_graph_destroy": (None, [PTR]),
    # ---- device.h
    "dlt_device_arch_cores": (STATUS, [I32, I32, P(I32), P(I32)]),
    "dlt_device_info_get": (STATUS, [I32, P(PTR)]),
    "dlt_device_info_destroy": (None, [PTR]),
    "dlt_device_info_int": (STATUS, [PTR, I32, P(I64)]),
    "dlt_device_info_double": (STATUS, [PTR, I32, P(F64)]),
    "dlt_device_info_string": (STATUS, [PTR, I32, STR, SIZE, P(SIZE)]),
    "dlt_device_info_key_name": (STR, [I32]),
    "dlt_device_info_key_type": (I32, [I32]),
    "dlt_bench_copy_bandwidth": (STATUS, [PTR, SIZE, P(F64)]),
    "dlt_bench_gemm": (STATUS, [PTR, I32, I64, I64, I64, P(F64)]),
    "dlt_gpu_monitor_start": (STATUS, [I32, I32, P(PTR)]),
    "dlt_gpu_monitor_stop": (STATUS, [PTR]),
    "dlt_gpu_monitor_destroy": (None, [PTR]),
    "dlt_gpu_monitor_int": (STATUS, [PTR, I32, P(I64)]),
    "dlt_gpu_monitor_double": (STATUS, [PTR, I32, P(F64)]),
    "dlt_gpu_monitor_string": (STATUS, [PTR, I32, STR, SIZE, P(SIZE)]),
    "dlt_gpu_monitor_key_name": (STR, [I32]),
    "dlt_gpu_monitor_key_type": (I32, [I32]),
    # report (issue 23): the monitor's sample series
    "dlt_gpu_monitor_series": (STATUS, [PTR, I64, I64, I32, P(F64), P(I64)]),
    "dlt_gpu_monitor_series_field_name": (STR, [I32]),
    # ---- dist.h (issue 21): communicators, DDP, distributed samplers
    "dlt_dist_env": (STATUS, [P(I32), P(I32), P(I32)]),
    "dlt_comm_options_init": (None, [PTR, U32]),
    "dlt_comm_create_ex": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_comm_create": (STATUS, [PTR, P(PTR)]),
    "dlt_comm_create_nccl": (STATUS, [PTR, I32, I32, PTR, SIZE, P(PTR)]),
    "dlt_nccl_unique_id": (STATUS, [PTR, SIZE]),
    "dlt_nccl_version": (STATUS, [P(I32)]),
    "dlt_comm_destroy": (None, [PTR]),
    "dlt_comm_rank": (I32, [PTR]),
    "dlt_comm_world_size": (I32, [PTR]),
    "dlt_comm_ctx": (PTR, [PTR]),
    "dlt_comm_backend": (STR, [PTR]),
    "dlt_comm_check": (STATUS, [PTR]),
    "dlt_comm_all_reduce": (STATUS, [PTR, PTR, I32]),
    "dlt_comm_broadcast": (STATUS, [PTR, PTR, I32]),
    "dlt_comm_all_gather": (STATUS, [PTR, PTR, PTR]),
    "dlt_comm_reduce_scatter": (STATUS, [PTR, PTR, PTR, I32]),
    "dlt_comm_barrier": (STATUS, [PTR]),
    "dlt_grad_scaler_set_comm": (STATUS, [PTR, PTR]),
    "dlt_comm_checkpoint_save": (STATUS, [PTR, STR, PTR, PTR, PTR, I64, I64]),
    "dlt_ddp_options_init": (None, [PTR, U32]),
    "dlt_ddp_create_ex": (STATUS, [PTR, PTR, PTR, P(PTR)]),
    "dlt_ddp_create": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_ddp_destroy": (None, [PTR]),
    "dlt_ddp_forward": (STATUS, [PTR, PTR, P(PTR)]),
    "dlt_ddp_no_sync": (STATUS, [PTR, I32]),
    "dlt_ddp_num_buckets": (I32, [PTR]),
    "dlt_ddp_bucket": (STATUS, [PTR, I32, P(I32), I32, P(I32), P(I64)]),
    "dlt_ddp_overlap": (STATUS, [PTR, P(I32), P(I32)]),
    "dlt_loader_set_distributed": (STATUS, [PTR, I32, I32, I32]),
    "dlt_loader_num_samples": (I64, [PTR]),
    "dlt_token_loader_set_distributed": (STATUS, [PTR, I32, I32]),
}


def _candidates():
    env = os.environ.get("DLTRAIN_LIBRARY")
    if env:
        return [env], True
    names = []
    # build: the wheel's bundled copy, by absolute path (the loader does not search here)
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "libdltrain.so.%d" % ABI_VERSION)
    if os.path.exists(bundled):
        names.append(bundled)
    names.append("libdltrain.so.%d" % ABI_VERSION)
    found = ctypes.util.find_library("dltrain")
    if found:
        names.append(found)
    names.append("libdltrain.so")
    return names, False


def _load():
    names, from_env = _candidates()
    tried = []
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    if from_env:
        raise ImportError("dltrain: cannot load the library named by DLTRAIN_LIBRARY: " + tried[0])
    raise ImportError(
        "dltrain: libdltrain not found (tried %s). Install libdltrain (meson install), add its "
        "directory to LD_LIBRARY_PATH, or set DLTRAIN_LIBRARY to the path of libdltrain.so"
        % "; ".join(tried))


def check_abi(library_abi, path):
    """Raises ImportError unless the library's ABI generation is the binding's."""
    if library_abi != ABI_VERSION:
        raise ImportError(
            "dltrain: %s is libdltrain ABI %d but this binding speaks ABI %d; install the "
            "matching library or binding" % (path, library_abi, ABI_VERSION))


class _Missing:
    """Stands in for a function the loaded library does not export."""

    def __init__(self, name, path):
        self.__name__ = name
        self._path = path

    def __call__(self, *args):
        raise NotImplementedError(
            "%s is not implemented by the loaded libdltrain (%s does not export it)"
            % (self.__name__, self._path))


class Library:
    """The loaded CDLL with every public function declared; attribute access by C name."""

    def __init__(self, cdll, path):
        self.cdll = cdll
        self.path = path
        self.missing = []
        for name, (restype, argtypes) in _SIGNATURES.items():
            if hasattr(cdll, name):
                f = getattr(cdll, name)
                f.restype = restype
                f.argtypes = argtypes
                setattr(self, name, _wrap(name, f, argtypes))
            else:
                self.missing.append(name)
                setattr(self, name, _Missing(name, path))

    def has(self, name):
        """True when the library exports `name` (a function of the public API)."""
        return name not in self.missing and hasattr(self, name)

    def declare(self, name, restype, argtypes):
        """Declares a function beyond the table (used by optional modules)."""
        if hasattr(self.cdll, name):
            f = getattr(self.cdll, name)
            f.restype = restype
            f.argtypes = argtypes
            f = _wrap(name, f, argtypes)
            if name in self.missing:
                self.missing.remove(name)
        else:
            if name not in self.missing:
                self.missing.append(name)
            f = _Missing(name, self.path)
        setattr(self, name, f)
        return f

    # ---- status handling -------------------------------------------------------------
    def last_error_message(self):
        n = self.dlt_last_error_copy(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.dlt_last_error_copy(buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def check(self, status):
        """Turns a non-OK dlt_status into the matching DltError subclass."""
        if status != 0:
            raise errors.from_status(status, self.last_error_message(),
                                     self.dlt_status_string(status).decode())
        return status


def _open():
    cdll, path = _load()
    if not hasattr(cdll, "dlt_abi_version"):
        raise ImportError("dltrain: %s is not libdltrain (no dlt_abi_version)" % path)
    cdll.dlt_abi_version.restype = U32
    cdll.dlt_abi_version.argtypes = []
    check_abi(int(cdll.dlt_abi_version()), path)
    return Library(cdll, path)


lib = _open()
check = lib.check


def out_ptr():
    """A fresh c_void_p to receive a handle through an out-pointer."""
    return ctypes.c_void_p()


def enc(s):
    """str (or bytes, or None) to bytes for a const char * argument."""
    if s is None or isinstance(s, bytes):
        return s
    return os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode("utf-8")
