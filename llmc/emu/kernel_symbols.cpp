// Reads the program's ELF symbol table (/proc/self/exe) once, then answers per kernel: which static
// __shared__ variables its body declares (function-local zero-initialised statics, mangled _ZZ<kernel>E...)
// and which launch bounds its ABI tag carries. See kernel_symbols.h.
#include "llmc/emu/kernel_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace llmc::emu {

namespace {

struct Symbol {
  uintptr_t address = 0;  // run-time address
  size_t bytes = 0;
  std::string name;
  bool local = false;
  int file_group = -1;  // local symbols: index of the object file they came from (STT_FILE order)
};

struct SymbolTable {
  std::vector<Symbol> functions;       // sorted by address
  std::vector<Symbol> local_statics;   // zero-initialised function-local statics (_ZZ...)
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "llmc emu: reading the symbol table of /proc/self/exe: %s (%s)\n", what,
               std::strerror(errno));
  std::abort();
}

uintptr_t main_program_load_bias() {
  uintptr_t bias = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<uintptr_t*>(out) = info->dlpi_addr;
        return 1;  // the first entry is the main program
      },
      &bias);
  return bias;
}

// The mapped file stays mapped for the life of the process (it is read once).
SymbolTable read_symbol_table() {
  const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open");
  struct stat status;
  if (fstat(fd, &status) != 0) fail("fstat");
  const size_t file_bytes = static_cast<size_t>(status.st_size);
  void* mapped = mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) fail("mmap");
  const auto* bytes = static_cast<const unsigned char*>(mapped);
  const auto* header = reinterpret_cast<const Elf64_Ehdr*>(bytes);
  if (file_bytes < sizeof(Elf64_Ehdr) || std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 ||
      header->e_ident[EI_CLASS] != ELFCLASS64) {
    fail("not a 64-bit ELF file");
  }
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes + header->e_shoff);
  const uintptr_t bias = main_program_load_bias();
  SymbolTable table;
  for (unsigned s = 0; s < header->e_shnum; ++s) {
    if (sections[s].sh_type != SHT_SYMTAB) continue;
    const auto* symbols = reinterpret_cast<const Elf64_Sym*>(bytes + sections[s].sh_offset);
    const char* names = reinterpret_cast<const char*>(bytes + sections[sections[s].sh_link].sh_offset);
    const size_t count = sections[s].sh_size / sizeof(Elf64_Sym);
    int file_group = -1;
    for (size_t i = 0; i < count; ++i) {
      const Elf64_Sym& symbol = symbols[i];
      const int type = ELF64_ST_TYPE(symbol.st_info);
      const bool local = ELF64_ST_BIND(symbol.st_info) == STB_LOCAL;
      if (type == STT_FILE) ++file_group;
      if (symbol.st_shndx == SHN_UNDEF || symbol.st_shndx >= header->e_shnum) continue;
      Symbol entry{bias + symbol.st_value, symbol.st_size, names + symbol.st_name, local,
                   local ? file_group : -1};
      if (type == STT_FUNC) {
        table.functions.push_back(std::move(entry));
      } else if (type == STT_OBJECT && symbol.st_size > 0 && entry.name.rfind("_ZZ", 0) == 0 &&
                 sections[symbol.st_shndx].sh_type == SHT_NOBITS) {
        table.local_statics.push_back(std::move(entry));  // __shared__ variables cannot be initialised
      }
    }
  }
  std::sort(table.functions.begin(), table.functions.end(),
            [](const Symbol& a, const Symbol& b) { return a.address < b.address; });
  return table;
}

const SymbolTable& symbol_table() {
  static const SymbolTable table = read_symbol_table();
  return table;
}

// Prefix of the mangled names of the function-local statics of `function` (Itanium ABI <local-name>).
std::string local_static_prefix(const std::string& function) {
  if (function.rfind("_Z", 0) == 0) return "_ZZ" + function.substr(2) + "E";
  return "_ZZ" + std::to_string(function.size()) + function + "E";  // extern "C"
}

void read_launch_bounds(const std::string& symbol, KernelSymbolInfo* info) {
  const size_t tag = symbol.find(kLaunchBoundsTagPrefix);
  if (tag == std::string::npos) return;
  // The tag is <length><text> after 'B'; its length covers the prefix and the argument text.
  size_t digits = tag;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(symbol[digits - 1]))) --digits;
  const size_t tag_length = static_cast<size_t>(std::strtoul(symbol.c_str() + digits, nullptr, 10));
  const size_t prefix_length = std::strlen(kLaunchBoundsTagPrefix);
  const std::string text = symbol.substr(tag + prefix_length, tag_length - prefix_length);
  const bool numeric = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if (numeric) {
    info->max_threads_per_block = std::atoi(text.c_str());
  } else {
    info->unreadable_launch_bounds = text;
  }
}

std::unique_ptr<KernelSymbolInfo> look_up(const void* kernel_address) {
  auto info = std::make_unique<KernelSymbolInfo>();
  const SymbolTable& table = symbol_table();
  const uintptr_t address = reinterpret_cast<uintptr_t>(kernel_address);
  auto found = std::lower_bound(table.functions.begin(), table.functions.end(), address,
                                [](const Symbol& symbol, uintptr_t a) { return symbol.address < a; });
  if (found == table.functions.end() || found->address != address) return info;
  const Symbol& kernel = *found;
  info->found = true;
  info->symbol = kernel.name;
  read_launch_bounds(kernel.name, info.get());
  const std::string prefix = local_static_prefix(kernel.name);
  for (const Symbol& variable : table.local_statics) {
    if (variable.name.rfind(prefix, 0) != 0) continue;
    // Kernels with internal linkage (anonymous namespaces) may share a mangled name across files.
    if (kernel.local && variable.local && variable.file_group != kernel.file_group) continue;
    info->static_shared.push_back(
        StaticSharedVariable{reinterpret_cast<void*>(variable.address), variable.bytes, variable.name});
    info->static_shared_bytes += variable.bytes;
  }
  return info;
}

}  // namespace

const KernelSymbolInfo& kernel_symbol_info(const void* kernel_address) {
  static std::mutex mutex;
  static std::unordered_map<const void*, std::unique_ptr<KernelSymbolInfo>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<KernelSymbolInfo>& entry = cache[kernel_address];
  if (entry == nullptr) entry = look_up(kernel_address);
  return *entry;
}

}  // namespace llmc::emu
