// Cold code: validation, messages and other paths that run once per call, out of every loop. With clang
// (the wasm builds) it is compiled for size: the wasm modules' gzipped size is part of the package's
// budget (docs/builds.md), and these paths have nothing to win from unrolling or vectorizing.
#pragma once

#if defined(__clang__)
#define MHA_MINSIZE __attribute__((minsize))
#else
#define MHA_MINSIZE
#endif
#define MHA_COLD __attribute__((noinline, cold)) MHA_MINSIZE
