/*
 * dltrain.h - libdltrain, a C11 deep-learning training library on CPU and CUDA.
 *
 * Umbrella header. Areas:
 *   dltrain/core.h      versions, statuses and errors, contexts, memory statistics
 *   dltrain/tensor.h    tensors, copies, casts, random fills
 *   dltrain/ops.h       differentiable operations
 *   dltrain/autograd.h  the gradient tape: backward, zero-grad, no-grad
 *   dltrain/nn.h        modules and torchvision's ResNets
 *   dltrain/optim.h     SGD and learning-rate schedules
 *   dltrain/amp.h       autocast and the GradScaler
 *   dltrain/data.h      CIFAR-10 and synthetic datasets, the loader, evaluation
 *   dltrain/io.h        safetensors checkpoints
 *   dltrain/graph.h     whole-step CUDA graphs
 *   dltrain/device.h    device info, micro-benchmarks, the NVML GPU monitor
 *   dltrain/dist.h      several processes: communicators, DDP, distributed samplers
 * docs/api.md is the reference; docs/guide.md shows a training loop.
 */
#ifndef DLTRAIN_H
#define DLTRAIN_H

#include "dltrain/core.h"
#include "dltrain/tensor.h"
#include "dltrain/ops.h"
#include "dltrain/autograd.h"
#include "dltrain/nn.h"
#include "dltrain/optim.h"
#include "dltrain/amp.h"
#include "dltrain/data.h"
#include "dltrain/io.h"
#include "dltrain/graph.h"
#include "dltrain/device.h"
#include "dltrain/gpt.h"
#include "dltrain/dist.h"

#endif
