// Which CUDA devices this process can use. Safe to call on machines without a GPU or driver:
// it then reports zero devices instead of failing.
#pragma once

namespace glimpse::kernels::cuda {

// Number of usable CUDA devices; 0 when there is no driver, no device, or the runtime fails.
int DeviceCount();

}  // namespace glimpse::kernels::cuda
