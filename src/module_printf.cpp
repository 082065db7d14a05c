// printf for the threaded wasm modules, which have no standard output: nothing in them prints.
//
// Why it exists: the only reference to printf in a threaded link is emmalloc-mt's sbrk.o, whose brk()
// (thread-unsafe in Emscripten 3.1.6, never called: emmalloc grows the heap with sbrk) prints a warning
// before it aborts. That reference alone pulls musl's printf.o, and printf.o pulls stdout.o. printf itself
// is then discarded, but stdout.o's FILE stays: it makes __stdout_used (which pthread_create reads) a strong
// symbol, and with that FILE come __stdio_write, the fd_write import and its proxy to the main thread.
// Defining printf here keeps printf.o and stdout.o out of the link: zlib -9 -295 B on
// mha-relaxed-threads.wasm. It aborts, as brk() does right after its message.
#include <cstdlib>

extern "C" int printf(const char* /*format*/, ...) { std::abort(); }
