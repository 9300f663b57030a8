// Fuzz target: a per-rank optimizer-state file (llmc/checkpoint/state_file.h), read every way a resume reads it:
// the header alone, the whole file (checksum verified), the checksum alone, pieces of each array; the
// ways must agree, and a write/read round trip must give back the same state. Each input is read twice:
// as it is, and with its checksum word recomputed, so that mutations also reach what lies behind the
// checksum check (a mutated file almost never carries a matching checksum).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/base/checksum.h"
#include "llmc/checkpoint/state_file.h"
#include "test/fuzz/fuzz_support.h"

using namespace llmc;
using llmc::fuzz::finding;
using llmc::fuzz::reads_cleanly;

namespace {
bool same_arrays(const std::vector<NamedStateArray>& a, const std::vector<NamedStateArray>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++)
    if (a[i].name != b[i].name || a[i].element_bytes != b[i].element_bytes || a[i].bytes != b[i].bytes) return false;
  return true;
}

bool same_state(const TrainState& a, const TrainState& b) {
  return a.step == b.step && a.rank == b.rank && a.world_size == b.world_size && a.model == b.model &&
         a.train_loader == b.train_loader && a.train_position == b.train_position &&
         a.bos_position == b.bos_position && a.grad_accum == b.grad_accum && a.batch_size == b.batch_size &&
         a.seq_len == b.seq_len && a.optimizer == b.optimizer && same_arrays(a.arrays, b.arrays);
}

// The first and the last few elements of each array the whole read found, read as a re-sharding resume reads
// them (only after a whole read: its names are what the pieces are asked for).
void check_pieces(const std::string& path, const TrainStateHeader& header, const TrainState& whole) {
  for (const NamedStateArray& array : whole.arrays) {
    const int64_t n = static_cast<int64_t>(array.bytes.size()) / array.element_bytes, count = n < 3 ? n : 3;
    if (train_state_array_elements(path, header, array.name) != n)
      finding("train_state_array_elements disagrees with read_train_state");
    for (int64_t first : {int64_t{0}, n - count}) {
      std::vector<char> piece(static_cast<size_t>(count * array.element_bytes));
      read_train_state_elements(path, header, array.name, first, count, piece.data());
      if (count > 0 && std::memcmp(piece.data(), array.bytes.data() + first * array.element_bytes, piece.size()) != 0)
        finding("read_train_state_elements disagrees with read_train_state");
    }
  }
}

// The input with header word 31 set to the XXH3-64 of the file with that word zero (as the writer does).
std::string with_repaired_checksum(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t at = (kTrainStateHeaderWords - 1) * sizeof(int64_t);
  std::memset(&bytes[at], 0, sizeof(int64_t));
  Checksum checksum;
  checksum.update(bytes.data(), bytes.size());
  const uint64_t digest = checksum.digest();
  std::memcpy(&bytes[at], &digest, sizeof digest);
  return bytes;
}

void read_every_way(const fuzz::InputFile& input) {
  const std::string& path = input.path();
  TrainStateHeader header;
  TrainState state;
  const bool header_read = reads_cleanly([&] { header = read_train_state_header(path); }, path);
  const bool whole_read = reads_cleanly([&] { state = read_train_state(path); }, path);
  const bool verified = reads_cleanly([&] { verify_train_state(path); }, path);
  if (whole_read != verified) finding("read_train_state and verify_train_state disagree");
  if (whole_read && !header_read) finding("the whole file reads but its header does not");
  if (!whole_read) return;
  check_pieces(path, header, state);
  write_train_state(input.copy(), state);
  if (!same_state(read_train_state(input.copy()), state)) finding("a state file round trip changed the state");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  read_every_way(fuzz::InputFile(data, size, "_state.bin"));
  if (size < kTrainStateHeaderWords * sizeof(int64_t)) return 0;
  const std::string repaired = with_repaired_checksum(data, size);
  read_every_way(fuzz::InputFile(reinterpret_cast<const uint8_t*>(repaired.data()), repaired.size(), "_state.bin"));
  return 0;
}
