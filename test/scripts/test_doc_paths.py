"""Every repository path the documentation names exists, so docs cannot silently rot when code moves.

Checks README.md, docs/*.md and records/README.md: each path under llmc/, test/, scripts/, cmake/ or
docs/ (globs like llmc/kernels/*.cuh must match something, brace lists like llmc/{data,model}/ are
expanded), each data/ tool (data/*.py, .sh, .cpp; other data/ paths are outputs a run creates), and
each relative Markdown link target, resolved from the file that holds it, with its #anchor if any.
"""
import glob
import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

# A path starts at a checked top-level folder that is not itself part of a longer word or path.
PATH = re.compile(r"(?<![\w./-])((?:llmc|test|scripts|cmake|docs|data)/[\w./*{},-]*)")
DATA_TOOL_SUFFIXES = (".py", ".sh", ".cpp")
LINK = re.compile(r"\]\(([^)\s]+)\)")
BRACES = re.compile(r"\{([^{}]*)\}")


def documentation_files():
    files = [os.path.join(REPO, "README.md"), os.path.join(REPO, "records", "README.md")]
    files += sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    return [f for f in files if os.path.isfile(f)]


def expand_braces(path):
    """llmc/{a,b}/x -> [llmc/a/x, llmc/b/x] (nested lists expand one level at a time)."""
    match = BRACES.search(path)
    if not match:
        return [path]
    head, tail = path[:match.start()], path[match.end():]
    return [p for choice in match.group(1).split(",") for p in expand_braces(head + choice + tail)]


def mentioned_paths(text):
    for raw in PATH.findall(text):
        path = raw.rstrip(".,;:")
        if "<" in path or path.startswith("data/") and not path.endswith(DATA_TOOL_SUFFIXES):
            continue
        yield path


def exists_in_repo(path):
    return all(glob.glob(os.path.join(REPO, p.rstrip("/") or ".")) for p in expand_braces(path))


def anchors(markdown_path):
    """The heading anchors GitHub generates for a Markdown file: lower case, punctuation other than
    '-' and '_' dropped, spaces as '-', repeats suffixed -1, -2, ..."""
    found, seen = set(), {}
    with open(markdown_path, encoding="utf-8") as handle:
        in_code = False
        for line in handle:
            if line.startswith("```"):
                in_code = not in_code
            if in_code or not line.startswith("#"):
                continue
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


class DocumentationPaths(unittest.TestCase):
    def test_there_is_documentation_to_check(self):
        names = [os.path.relpath(f, REPO) for f in documentation_files()]
        self.assertIn("README.md", names)
        self.assertIn(os.path.join("docs", "README.md"), names)

    def test_named_paths_exist(self):
        missing = []
        for doc in documentation_files():
            with open(doc, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    missing += [f"{os.path.relpath(doc, REPO)}:{number}: {path}"
                                for path in mentioned_paths(line) if not exists_in_repo(path)]
        self.assertEqual(missing, [], "paths named in the documentation that do not exist")

    def test_relative_links_resolve(self):
        broken = []
        for doc in documentation_files():
            with open(doc, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    for target in LINK.findall(line):
                        if re.match(r"^[a-z]+:", target):
                            continue  # a URL
                        file_part, _, anchor = target.partition("#")
                        path = os.path.normpath(os.path.join(os.path.dirname(doc), file_part)) if file_part else doc
                        if not os.path.exists(path) or anchor and (
                                not path.endswith(".md") or anchor not in anchors(path)):
                            broken.append(f"{os.path.relpath(doc, REPO)}:{number}: {target}")
        self.assertEqual(broken, [], "Markdown links whose target does not exist")

    def test_the_checker_sees_a_missing_path(self):
        # The check must be able to fail: a made-up path is reported, a real one is not.
        self.assertEqual(list(mentioned_paths("see `llmc/kernels/no_such_kernel.cuh`, then")),
                         ["llmc/kernels/no_such_kernel.cuh"])
        self.assertFalse(exists_in_repo("llmc/kernels/no_such_kernel.cuh"))
        self.assertTrue(exists_in_repo("llmc/{data,model}/"))
        self.assertFalse(exists_in_repo("llmc/{data,no_such_folder}/"))
        self.assertEqual(list(mentioned_paths("python3 data/cache/x.bin data/tinyshakespeare.py")),
                         ["data/tinyshakespeare.py"])
        self.assertIn("tests", anchors(os.path.join(REPO, "docs", "kernels.md")))
        self.assertNotIn("no-such-section", anchors(os.path.join(REPO, "docs", "kernels.md")))


if __name__ == "__main__":
    unittest.main()
