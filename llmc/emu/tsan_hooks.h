// ThreadSanitizer annotations of the emulation, so that TSan sees emulated GPU threads as threads and
// exactly the ordering CUDA guarantees: each emulated thread is a TSan fiber, switches between fibers
// imply no ordering, and barriers, __syncwarp, kernel boundaries and stream/event waits are explicit
// release/acquire edges. Every function is a no-op unless the build defines LLMC_EMU_TSAN (-DLLMC_TSAN=ON).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(LLMC_EMU_TSAN)
extern "C" {
// Public TSan interface (sanitizer/tsan_interface.h), declared here so that files compiled without
// -fsanitize=thread (the scheduler's own code, which TSan must not see) can call it too.
void __tsan_acquire(void* address);
void __tsan_release(void* address);
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_set_fiber_name(void* fiber, const char* name);
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
// Dynamic-annotation entry points of the TSan runtime.
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
// The Java-heap interface: __tsan_java_alloc resets the access history of a range (what TSan does for a
// fresh allocation). The emulation uses it for memory a GPU gives each block afresh (shared memory).
void __tsan_java_init(unsigned long heap_begin, unsigned long heap_size);
void __tsan_java_alloc(unsigned long address, unsigned long size);
void __tsan_java_free(unsigned long address, unsigned long size);
}
#endif

namespace llmc::emu::tsan {

#if defined(LLMC_EMU_TSAN)
inline constexpr bool kEnabled = true;
inline void* current_fiber() { return __tsan_get_current_fiber(); }
inline void* create_fiber(const char* name) {
  void* fiber = __tsan_create_fiber(0);
  __tsan_set_fiber_name(fiber, name);
  return fiber;
}
inline void destroy_fiber(void* fiber) { __tsan_destroy_fiber(fiber); }
// Flag 1 = __tsan_switch_to_fiber_no_sync: switching fibers orders nothing.
inline void switch_to_fiber(void* fiber) { __tsan_switch_to_fiber(fiber, 1); }
inline void release(const void* sync_object) { __tsan_release(const_cast<void*>(sync_object)); }
inline void acquire(const void* sync_object) { __tsan_acquire(const_cast<void*>(sync_object)); }
// Memory accesses of the calling (TSan) thread are not recorded between begin and end.
inline void ignore_accesses_begin() { __tsan_ignore_thread_begin(); }
inline void ignore_accesses_end() { __tsan_ignore_thread_end(); }
// Mutex and atomic operations of the calling thread create no ordering between begin and end.
inline void ignore_sync_begin() { AnnotateIgnoreSyncBegin(__FILE__, __LINE__); }
inline void ignore_sync_end() { AnnotateIgnoreSyncEnd(__FILE__, __LINE__); }
// Forgets every access to [begin, begin + bytes): the memory is new, as after malloc.
void forget_accesses(void* begin, size_t bytes);
#else
inline constexpr bool kEnabled = false;
inline void* current_fiber() { return nullptr; }
inline void* create_fiber(const char*) { return nullptr; }
inline void destroy_fiber(void*) {}
inline void switch_to_fiber(void*) {}
inline void release(const void*) {}
inline void acquire(const void*) {}
inline void ignore_accesses_begin() {}
inline void ignore_accesses_end() {}
inline void ignore_sync_begin() {}
inline void ignore_sync_end() {}
inline void forget_accesses(void*, size_t) {}
#endif

// Scoped forms.
struct IgnoreAccesses {
  IgnoreAccesses() { ignore_accesses_begin(); }
  ~IgnoreAccesses() { ignore_accesses_end(); }
  IgnoreAccesses(const IgnoreAccesses&) = delete;
  IgnoreAccesses& operator=(const IgnoreAccesses&) = delete;
};
struct IgnoreSync {
  IgnoreSync() { ignore_sync_begin(); }
  ~IgnoreSync() { ignore_sync_end(); }
  IgnoreSync(const IgnoreSync&) = delete;
  IgnoreSync& operator=(const IgnoreSync&) = delete;
};

}  // namespace llmc::emu::tsan
