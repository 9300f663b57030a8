// Compiled, never run: instantiates every kernel of the project's two wgmma GEMMs (each epilogue, both weight
// layouts) so that the test wgmma_ptxas_advisories (cmake/kernels.cmake) can fail on ptxas's advisories that a
// wgmma was serialised or needed an injected warpgroup.arrive/wait: performance lost on the GPU, seen here.
#include "llmc/kernels/wgmma_fp8_gemm.cuh"
#include "llmc/kernels/wgmma_gemm.cuh"

void instantiate_every_wgmma_kernel(llmc::WgmmaEpilogue epilogue, const llmc::WgmmaGemmArgs& bf16,
                                    const llmc::WgmmaFp8ReluSquaredArgs& fp8) {
  llmc::wgmma_gemm_launch(epilogue, bf16, nullptr);
  llmc::wgmma_fp8_relu_squared_launch(fp8, nullptr);
}
