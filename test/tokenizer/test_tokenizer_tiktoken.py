#!/usr/bin/env python3
"""Compares our C++ GPT-2 tokenizer with tiktoken (the oracle), token for token.

tiktoken is built offline from r50k_base.tiktoken with GPT-2's published pattern. Compared:
both shared texts whole; a stress set of tricky strings (letters and digits of many scripts, CJK,
emoji with ZWJ, combining marks, every kind of whitespace run, contractions); random strings from
a fixed seed; and every assigned Unicode code point (Python's unicodedata, Unicode 14 like our
PCRE2) in a context that exposes which regex class it falls in. Exit status 0 only if all match.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import unicodedata

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def load_tiktoken_gpt2(vocab_dir):
    import tiktoken
    import tiktoken.load
    ranks = tiktoken.load.load_tiktoken_bpe(os.path.join(vocab_dir, "r50k_base.tiktoken"))
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def probe_lines(probe, vocab_dir, strings):
    """Our ids for each string (one probe process for the whole list)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="ascii") as f:
        for s in strings:
            f.write(json.dumps(s, ensure_ascii=True) + "\n")
        path = f.name
    try:
        out = subprocess.run([probe, "lines", vocab_dir, path], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    lines = out.split("\n")[:-1]
    assert len(lines) == len(strings), f"probe returned {len(lines)} lines for {len(strings)} strings"
    return [[int(t) for t in line.split()] for line in lines]


def stress_strings():
    ws = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\x85", "\xa0", "\u1680", "\u2000", "\u2005", "\u200a",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff", "\x1c", "\x1f"]
    base = [
        "Hello, the world!", "hello world", " the", "", " ", "  ", "\n", "\n\n\n", " \n \n ", "\t\t x",
        "trailing spaces   ", "   leading", "a  b   c    d", "line1\r\nline2\r\n", "\n\nWord\n\n  Word",
        "it's they're we've I'm you'll he'd don't", "IT'S THEY'RE WE'VE I'M YOU'LL HE'D", "'S 'T 'Re",
        "''s '''t 's's", "O'Neil's rock'n'roll", "x's", "'", "'''", "' s", "1's 2'd",
        "12345678901234567890", "3.14159 2,718 1e10 -5", "٣٤٥ ۱۲۳ १२३ ๑๒๓ ①②③ Ⅻ ½ ¾", "²³ ₁₂",
        "naïve café résumé Ærø Straße İstanbul ǅ", "Ελληνικά Кириллица עברית العربية हिन्दी ไทย",
        "日本語のテキスト、中文文本。한국어 텍스트", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛", "😀😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️‍🔥",
        "e\u0301 a\u0308\u0323 \u0915\u094d\u0937", "Zalgo: Z\u0335\u0321\u0327a\u0336l\u0337g\u0338o",
        "!!!???... ---*** ###", "<|endoftext|>", "a<|endoftext|>b", "\x00\x01\x7f",
        "tabs\tand\ttabs\t\t\t", "x" * 300, "!" * 1000, "!" * 70000, " " * 5000 + "x", " " * 1000 + "x", "\n" * 500, "ab" * 400,
        "こんにちは" * 50, "🙂" * 100, "a1b2c3 A1B2C3 ½1 1½", "$100.00 €5 ¥1000 £3",
        "https://example.com/path?q=1&r=2#frag", "email@example.org", "C++ -> std::vector<int>{1,2}",
        "\u0000 nul", "\ufffd replacement", "\U0010fffd plane 16", "\ue000 private", "\U000e0001 tag",
    ]
    out = list(base)
    for w in ws:  # each whitespace-ish character alone, in runs, before words and at the end
        out += [w, w * 3, f"a{w}b", f"a{w}{w}b", f"a {w}b", f"a{w} b", f"{w}{w} x", f"x{w}", f"x {w}",
                f"x{w}\n", f"1{w}2", f"!{w}?", f"{w}'s", f"{w}é", f"\n{w}\n"]
    return out


def random_strings(count, seed):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r\x0b\x0c",
        "\xa0\u2009\u3000\u2028\x85\u1680\u202f", "'sStTrReEvVmMlLdD", ".,;:!?-_()[]{}<>/\\\"@#$%^&*+=|~`",
        "àéîõüçñßøåÆŒĳŁĄ", "αβγδεζηθλμπσωΩΔ", "абвгдеёжзийклмн", "אבגדהוזחטי", "ابتثجحخدذر",
        "अआइईउऊकखगघ", "一二三四五六七八九十中文字", "ひらがなカタカナ", "한국어텍스트", "٠١٢٣٤٥٦٧٨٩",
        "०१२३४५६७८९", "①②③ⅠⅡⅢ½¼", "😀😃😄😁😆🙂🙃", "\u200d\ufe0f\U0001f3fd", "\u0301\u0308\u0323\u094d",
        "\u200b\ufeff\u00ad", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢𝟙𝟚𝟛",
    ]
    out = []
    for _ in range(count):
        length = rng.randint(1, 60)
        s = []
        for _ in range(length):
            pool = rng.choice(pools)
            s.append(rng.choice(pool) * (1 if rng.random() < 0.8 else rng.randint(2, 6)))
        out.append("".join(s))
    return out


def every_code_point_strings():
    """One string per assigned code point c (not surrogate or private use): its class (letter,
    number, whitespace, other) decides how it joins its neighbours in 'a' c c '7' ' ' c ..."""
    out = []
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat in ("Cn", "Cs", "Co"):
            continue
        c = chr(cp)
        out.append(f"a{c}{c}7 {c}x {c}\n{c}{c} 's{c}")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--probe", required=True, help="path of the tokenizer_probe binary")
    parser.add_argument("--shared", required=True, help="the shared data directory")
    args = parser.parse_args()
    vocab_dir = os.path.join(args.shared, "data", "gpt2")
    enc = load_tiktoken_gpt2(vocab_dir)
    failures = 0

    for name in ("tinyshakespeare.txt", "kjv.txt"):
        path = os.path.join(args.shared, "data", "text", name)
        start = time.time()
        ours = [int(t) for t in subprocess.run([args.probe, "ids", vocab_dir, path], check=True,
                                               capture_output=True, text=True).stdout.split()]
        with open(path, encoding="utf-8") as f:
            theirs = enc.encode_ordinary(f.read())
        same = ours == theirs
        failures += not same
        print(f"{name}: ours {len(ours)} tokens, tiktoken {len(theirs)}: {'OK' if same else 'DIFFERENT'}"
              f" ({time.time() - start:.1f}s)")
        if not same:
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            print(f"  first difference at token {first}: ours {ours[first:first + 5]} tiktoken {theirs[first:first + 5]}")

    for label, strings in (("stress", stress_strings()), ("random(seed=1234)", random_strings(3000, 1234)),
                           ("every code point", every_code_point_strings())):
        start = time.time()
        ours = probe_lines(args.probe, vocab_dir, strings)
        bad = [(s, o, t) for s, o in zip(strings, ours) for t in [enc.encode_ordinary(s)] if o != t]
        failures += len(bad)
        print(f"{label}: {len(strings) - len(bad)}/{len(strings)} strings identical ({time.time() - start:.1f}s)")
        for s, o, t in bad[:10]:
            print(f"  MISMATCH {s!r}: ours {o} tiktoken {t}")
    print("PASS" if failures == 0 else f"FAIL: {failures} mismatches")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
