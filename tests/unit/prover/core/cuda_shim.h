/* Runs the prover's CUDA kernels as plain C++ on CPU threads, for machines without a GPU.

   A launch starts blockDim.x threads once; each runs every block in turn, with a barrier
   between blocks, so __shared__ (a function-local static) is reused safely. __syncthreads()
   is the same barrier. Only what kuzk_prover.core.cuda_source uses is provided. */
#include <barrier>
#include <thread>
#include <vector>

struct ShimDim3 {
    unsigned x = 1, y = 1, z = 1;
};
static thread_local ShimDim3 threadIdx, blockIdx;
static ShimDim3 blockDim, gridDim;
static std::barrier<>* shim_barrier = nullptr;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__

inline void __syncthreads() { shim_barrier->arrive_and_wait(); }

inline unsigned __brev(unsigned v) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i, v >>= 1) r = (r << 1) | (v & 1u);
    return r;
}

template <class Kernel>
void shim_launch(unsigned grid, unsigned block, Kernel kernel) {
    gridDim.x = grid;
    blockDim.x = block;
    std::barrier<> barrier(block);
    shim_barrier = &barrier;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
        threads.emplace_back([&, t] {
            threadIdx.x = t;
            for (unsigned b = 0; b < grid; ++b) {
                blockIdx.x = b;
                kernel();
                barrier.arrive_and_wait();
            }
        });
    }
    for (auto& thread : threads) thread.join();
}
