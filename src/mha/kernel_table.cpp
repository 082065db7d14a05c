// The kernel variants of this build, best first. CMake compiles each variant's translation unit with its
// own flags and defines MHA_KERNEL_<NAME> here for each one it links (CMakeLists.txt, MHA_KERNEL_VARIANTS).
#include "mha/kernel.hpp"

namespace mha {

#ifdef MHA_KERNEL_RELAXED
namespace relaxed {
extern const KernelVariant kKernel;  // kernel_simd128.cpp compiled with MHA_VARIANT_RELAXED (Relaxed SIMD)
}
#endif
#ifdef MHA_KERNEL_SIMD128
namespace simd128 {
extern const KernelVariant kKernel;  // kernel_simd128.cpp
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

}  // namespace

KernelList kernel_variants() { return KernelList{kVariants, sizeof(kVariants) / sizeof(kVariants[0])}; }

const KernelVariant& default_kernel() { return *kVariants[0]; }

}  // namespace mha
