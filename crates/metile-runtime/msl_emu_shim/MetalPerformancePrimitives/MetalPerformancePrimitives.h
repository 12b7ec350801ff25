// Metal Performance Primitives (Metal 4): the emulator implements
// mpp::tensor_ops::matmul2d over one simdgroup on cooperative tensors; see
// metile_emu/tensor_ops.h.
#pragma once
#include <metal_tensor>
#include "../metile_emu/tensor_ops.h"
