// One forward in flight on a GPU (internal to the CUDA backend): the stream it runs on, its
// cuBLAS handle, and the activations and staging sized for it. A backend has two: a big plain batch
// of a tensor-parallel rank runs as two halves, one on each lane, whose kernels overlap — one
// half's all-reduces (NVLink-bound) beside the other half's compute. Both lanes' work is enqueued
// (and captured) together, their sub-blocks alternating, so that the group's collectives keep one
// order on every rank: the ranks share one communicator per GPU, and NCCL runs its operations in
// the order they were issued (two communicators active at once on one GPU may deadlock, NCCL's
// documentation warns).
// Method scratch stays the backend's: dLLM-Cache's, d2Cache's rows and sparse selection's (batches
// using them run on lane 0 alone), and S2D2's verification (collect() uses it one lane after the
// other).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"

namespace dllm::cuda_backend {

struct ForwardLane {
  ForwardLane() = default;
  ForwardLane(const ForwardLane&) = delete;
  ForwardLane& operator=(const ForwardLane&) = delete;
  ~ForwardLane() { release(); }

  // The stream (at `priority`), the cuBLAS handle on it and the handle's own workspace (cuBLAS
  // must not allocate while a graph is being captured).
  void create(int priority);
  bool created() const { return stream != nullptr; }
  void release();

  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cuda::DeviceBuffer<char> cublas_workspace;

  // Activations and staging, grown to the largest forward seen on this lane. In a split batch
  // lane 1's row-sized activations are views into lane 0's, past the first half's rows
  // (CudaBackend::view_second_half).
  cuda::DeviceBuffer<float> x, qkv, attn_ws, logits;
  cuda::DeviceBuffer<cuda::bf16> xn, q, attn, gu, act, hn;
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<cuda::DeviceRowSums> stats;
  // MoE: router logits, routing, dispatch and the experts' activations of one layer.
  cuda::DeviceBuffer<float> router_logits, moe_weights, moe_y;
  cuda::DeviceBuffer<int32_t> moe_experts, moe_offsets, moe_order, moe_position, moe_work,
      moe_sort_scratch;
  cuda::DeviceBuffer<cuda::bf16> moe_act;
  cuda::PinnedBuffer<int32_t> pinned_ints;
  cuda::PinnedBuffer<cuda::DeviceRowSums> pinned_stats;
};

}  // namespace dllm::cuda_backend
