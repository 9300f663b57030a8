// The one ThreadSanitizer hook with a body (tsan_hooks.h): forgetting a range's access history, used for
// the shared memory a GPU gives each block afresh. Empty outside the TSan build.
#include "llmc/emu/tsan_hooks.h"

namespace llmc::emu {

#if defined(LLMC_EMU_TSAN)
void tsan::forget_accesses(void* begin, size_t bytes) {
  // TSan's Java-heap interface needs a heap declared once; the emulation uses only its "this memory is
  // fresh" call, on ranges it owns, rounded out to TSan's 8-byte granules.
  static const bool java_heap_declared = [] {
    alignas(8) static char dummy_heap[8];
    __tsan_java_init(reinterpret_cast<unsigned long>(dummy_heap), sizeof dummy_heap);
    return true;
  }();
  (void)java_heap_declared;
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~uintptr_t{7};
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes + 7) & ~uintptr_t{7};
  if (last == first) return;
  __tsan_java_free(first, last - first);
  __tsan_java_alloc(first, last - first);
}
#endif

}  // namespace llmc::emu
