#include <cuda_runtime.h>

#include "kernels/cuda/device_info.h"

namespace glimpse::kernels::cuda {

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

}  // namespace glimpse::kernels::cuda
