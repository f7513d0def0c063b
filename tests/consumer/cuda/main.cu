// precis::cuda from an installed package: the device headers compile with nvcc, and the
// program asks how many devices there are (0 on a machine without a GPU is fine).
#include <cstdio>

#include <precis/cuda/device.cuh>

int main() {
  std::printf("precis::cuda consumer: %d device(s)\n", precis::cuda::device_count());
  return 0;
}
