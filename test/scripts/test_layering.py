"""The folders of llmc/ only point down: every #include "llmc/..." of llmc/, train_gpt2.cu and
generate_gpt2.cu names its own folder or one of a lower layer of docs/architecture.md's picture (the
```layers block: highest layer first, one layer per line, its folders first). A failure names the file
and line of each include that points sideways or up, and each source in a folder the picture lacks.
"""
import os
import re
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PROGRAMS = ("train_gpt2.cu", "generate_gpt2.cu")
SOURCE_SUFFIXES = (".h", ".cuh", ".cpp", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s*"(llmc/[^"]+)"')


def read_layers(architecture_md):
    """{folder: layer number} from the ```layers block (0 = the lowest layer); "programs" for the programs."""
    with open(architecture_md, encoding="utf-8") as md:
        text = md.read()
    block = re.search(r"^```layers\n(.*?)^```", text, re.M | re.S)
    if block is None:
        raise ValueError(f"{architecture_md}: no ```layers block")
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    layers = {}
    for height, line in enumerate(reversed(lines)):
        for token in line.split():
            if token == "programs":
                layers[token] = height
            elif token.endswith("/"):
                layers[token.rstrip("/")] = height
            else:
                break  # the description
    return layers


def folder_of(path):
    """The folder of a repository path as the picture names it: "model/gpt2" for llmc/model/gpt2/x.h."""
    if path in PROGRAMS:
        return "programs"
    return os.path.dirname(path)[len("llmc/"):]


def source_files(root):
    files = [p for p in PROGRAMS if os.path.isfile(os.path.join(root, p))]
    for directory, _, names in os.walk(os.path.join(root, "llmc")):
        for name in sorted(names):
            if name.endswith(SOURCE_SUFFIXES):
                files.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(files)


def violations(root, layers):
    """One line per include that points sideways or up, per file of an undeclared folder."""
    found = []
    for path in source_files(root):
        folder = folder_of(path)
        if folder not in layers:
            found.append(f"{path}: folder {folder or 'llmc'}/ is not in docs/architecture.md's layers")
            continue
        with open(os.path.join(root, path), encoding="utf-8") as source:
            for number, line in enumerate(source, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = folder_of(match.group(1))
                if target == folder:
                    continue
                if target not in layers:
                    found.append(f"{path}:{number}: includes {match.group(1)}, in a folder the layers do not name")
                elif layers[target] >= layers[folder]:
                    way = "sideways" if layers[target] == layers[folder] else "up"
                    found.append(f"{path}:{number}: {folder}/ includes {match.group(1)} ({target}/ is {way})")
    return found


class Layering(unittest.TestCase):
    def test_every_include_points_down(self):
        layers = read_layers(os.path.join(REPO, "docs", "architecture.md"))
        self.assertEqual(violations(REPO, layers), [])

    def test_the_picture_names_the_expected_layers(self):
        layers = read_layers(os.path.join(REPO, "docs", "architecture.md"))
        self.assertGreater(layers["programs"], layers["train"])
        self.assertGreater(layers["model"], layers["model/gpt2"])
        self.assertEqual(layers["model/gpt2"], layers["model/modded44"])
        self.assertGreater(layers["cuda"], layers["emu"])
        self.assertEqual(min(layers.values()), layers["base"])


class CheckerSeesViolations(unittest.TestCase):
    """The checker itself, on a planted tree: an upward, a sideways and an undeclared include are named."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="test_layering_")
        self.addCleanup(shutil.rmtree, self.root)
        self.layers = {"programs": 3, "train": 2, "data": 1, "dist": 1, "base": 0}

    def write(self, path, *includes):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full) or self.root, exist_ok=True)
        with open(full, "w", encoding="utf-8") as out:
            out.write("// planted\n" + "".join(f'#include "{i}"\n' for i in includes))

    def test_a_clean_tree_passes(self):
        self.write("llmc/base/a.h")
        self.write("llmc/data/b.h", "llmc/base/a.h", "llmc/data/c.h")
        self.write("train_gpt2.cu", "llmc/train/t.h", "llmc/data/b.h")
        self.assertEqual(violations(self.root, self.layers), [])

    def test_an_upward_include_is_named_with_its_line(self):
        self.write("llmc/base/a.h", "llmc/base/b.h", "llmc/train/t.h")
        self.assertEqual(violations(self.root, self.layers),
                         ["llmc/base/a.h:3: base/ includes llmc/train/t.h (train/ is up)"])

    def test_a_sideways_include_is_named(self):
        self.write("llmc/data/b.cpp", "llmc/dist/comm.h")
        self.assertEqual(violations(self.root, self.layers),
                         ["llmc/data/b.cpp:2: data/ includes llmc/dist/comm.h (dist/ is sideways)"])

    def test_undeclared_folders_are_named(self):
        self.write("llmc/extra/x.h")
        self.write("llmc/base/a.h", "llmc/elsewhere/y.h")
        self.assertEqual(violations(self.root, self.layers),
                         ["llmc/base/a.h:2: includes llmc/elsewhere/y.h, in a folder the layers do not name",
                          "llmc/extra/x.h: folder extra/ is not in docs/architecture.md's layers"])

    def test_the_picture_is_read_highest_first(self):
        md = os.path.join(self.root, "architecture.md")
        with open(md, "w", encoding="utf-8") as out:
            out.write("text\n```layers\nprograms  main\ntrain/   the trainer\n"
                      "data/ dist/   loaders: not/a/folder/\nbase/  helpers\n```\n")
        self.assertEqual(read_layers(md), {"programs": 3, "train": 2, "data": 1, "dist": 1, "base": 0})


if __name__ == "__main__":
    unittest.main()
