// The kernel variants of this build, best first: the tiled (prefill) kernels and the decode kernels.
// CMake compiles each variant's translation units (its tiled kernel and, if it has one, its decode
// kernel) with its own flags and defines MHA_KERNEL_<NAME> here for each variant it links, and
// MHA_DECODE_<NAME> for each decode kernel (CMakeLists.txt, MHA_KERNEL_<name>_SOURCES).
#include "mha/decode/decode.hpp"
#include "mha/decode/decode_kernel.hpp"
#include "mha/kernels/kernel.hpp"

namespace mha {

#ifdef MHA_KERNEL_RELAXED
namespace relaxed {
extern const KernelVariant kKernel;  // kernel_simd128.cpp compiled with MHA_VARIANT_RELAXED (Relaxed SIMD)
}
#endif
#ifdef MHA_DECODE_RELAXED
namespace relaxed {
extern const DecodeKernel kDecodeKernel;  // decode_simd128.cpp compiled with MHA_VARIANT_RELAXED (decode_relaxed.cpp)
}
#endif
#ifdef MHA_KERNEL_SIMD128
namespace simd128 {
extern const KernelVariant kKernel;  // kernel_simd128.cpp
}
#endif
#ifdef MHA_DECODE_SIMD128
namespace simd128 {
extern const DecodeKernel kDecodeKernel;  // decode_simd128.cpp
}
#endif
#ifdef MHA_KERNEL_SCALAR
namespace scalar {
extern const KernelVariant kKernel;  // kernel_scalar.cpp
}
#endif

namespace {

const KernelVariant* const kVariants[] = {
#ifdef MHA_KERNEL_RELAXED
    &relaxed::kKernel,
#endif
#ifdef MHA_KERNEL_SIMD128
    &simd128::kKernel,
#endif
#ifdef MHA_KERNEL_SCALAR
    &scalar::kKernel,
#endif
};

// The scalar decode kernel is in every core: the SIMD ones hand it their cold float16 blocks
// (decode_path.hpp).
const DecodeKernel* const kDecodeVariants[] = {
#ifdef MHA_DECODE_RELAXED
    &relaxed::kDecodeKernel,
#endif
#ifdef MHA_DECODE_SIMD128
    &simd128::kDecodeKernel,
#endif
    &scalar::kDecodeKernel,
};

}  // namespace

KernelList kernel_variants() { return KernelList{kVariants, sizeof(kVariants) / sizeof(kVariants[0])}; }

const KernelVariant& default_kernel() { return *kVariants[0]; }

DecodeKernelList decode_kernel_variants() {
  return DecodeKernelList{kDecodeVariants, sizeof(kDecodeVariants) / sizeof(kDecodeVariants[0])};
}

const DecodeKernel& default_decode_kernel() { return *kDecodeVariants[0]; }

}  // namespace mha
