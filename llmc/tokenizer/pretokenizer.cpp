// PCRE2 side of the pre-tokenizer. The pattern is compiled ANCHORED: every character belongs to one
// of its alternatives, so a match always starts exactly where the previous one ended, and anchoring
// spares the engine a search. Matching skips PCRE2's UTF check because the tokenizer validated once.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "llmc/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <stdexcept>
#include <string>

namespace llmc {

// White_Space = \t \n \v \f \r, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000.
#define LLMC_WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
const char* const kGpt2PretokenizePattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" LLMC_WS "\\p{L}\\p{N}]+"
    "|[" LLMC_WS "]+(?![^" LLMC_WS "])|[" LLMC_WS "]+";
#undef LLMC_WS

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Gpt2Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

struct PretokenizerScratch::State {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* match_context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~State() {
    pcre2_match_data_free(match_data);
    pcre2_match_context_free(match_context);
    pcre2_jit_stack_free(jit_stack);
  }
};

Gpt2Pretokenizer::Gpt2Pretokenizer() : compiled_(std::make_unique<Compiled>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2PretokenizePattern),
                                  PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED,
                                  &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    throw std::runtime_error("pcre2_compile(GPT-2 pattern) failed at offset " +
                             std::to_string(error_offset) + ": " + pcre2_message(error_code));
  }
  const int jit_rc = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
  if (jit_rc != 0) {
    throw std::runtime_error("pcre2_jit_compile(GPT-2 pattern) failed: " + pcre2_message(jit_rc));
  }
}

Gpt2Pretokenizer::~Gpt2Pretokenizer() = default;
Gpt2Pretokenizer::Gpt2Pretokenizer(Gpt2Pretokenizer&&) noexcept = default;
Gpt2Pretokenizer& Gpt2Pretokenizer::operator=(Gpt2Pretokenizer&&) noexcept = default;

PretokenizerScratch::PretokenizerScratch(const Gpt2Pretokenizer& pretokenizer)
    : state_(std::make_unique<State>()) {
  state_->match_data = pcre2_match_data_create_from_pattern(pretokenizer.compiled_->code, nullptr);
  state_->match_context = pcre2_match_context_create(nullptr);
  // The lookahead alternative backtracks over whitespace runs; a private stack that may grow to
  // 64 MB keeps megabyte-long runs of spaces from failing where the default 32 KB would.
  state_->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  if (!state_->match_data || !state_->match_context || !state_->jit_stack) {
    throw std::runtime_error("PCRE2 match state allocation failed (pcre2_*_create)");
  }
  pcre2_jit_stack_assign(state_->match_context, nullptr, state_->jit_stack);
}

PretokenizerScratch::~PretokenizerScratch() = default;

size_t Gpt2Pretokenizer::piece_end(PretokenizerScratch& scratch, std::string_view text,
                                   size_t start) const {
  const int rc = pcre2_jit_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()),
                                 text.size(), start, PCRE2_NO_UTF_CHECK, scratch.state_->match_data,
                                 scratch.state_->match_context);
  if (rc < 0) {
    // Cannot happen for valid UTF-8 (every character matches some alternative) short of
    // resource limits; say where it happened.
    throw std::runtime_error("pcre2_jit_match(GPT-2 pattern) at byte " + std::to_string(start) +
                             " failed: " + pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.state_->match_data);
  if (ovector[0] != start || ovector[1] <= start) {
    throw std::runtime_error("pcre2_jit_match(GPT-2 pattern) at byte " + std::to_string(start) +
                             " returned an empty or displaced match");
  }
  return ovector[1];
}

}  // namespace llmc
