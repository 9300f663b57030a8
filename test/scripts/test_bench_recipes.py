"""Tests of scripts/bench_recipes.py's bookkeeping (the trainers' runs are smoke-tested by bench_recipes_smoke).

Oracles: token counts and interpolations worked out here by hand from made-up logs and curves; the Welch t-test
against its formula, t = (m1 - m2) / sqrt(s1^2 / n1 + s2^2 / n2), written out here.
"""
import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import bench_recipes as br  # noqa: E402  (the module under test lives in scripts/)

# What the trainer prints where a batch schedule changes the sequence length (llmc/train/batch_schedule.cpp).
LOG = ("# batch: step 1 (schedule step 0) T=256 tokens per sequence, documents cut to 896 tokens\n"
       "step:1/6 train_loss:9.0 train_time:1ms\n"
       "# batch: step 3 (schedule step 2) T=512 tokens per sequence, documents cut to 2048 tokens\n"
       "# batch: step 5 (schedule step 4) T=768 tokens per sequence, documents cut to 2048 tokens\n")


class Tokens(unittest.TestCase):
    def test_batch_lines_set_each_steps_tokens(self):
        # 256, 256, 512, 512, 768, 768
        self.assertEqual(br.cumulative_tokens(LOG, 6, 512), [0, 256, 512, 1024, 1536, 2304, 3072])

    def test_fixed_batches_without_batch_lines(self):
        self.assertEqual(br.cumulative_tokens("step:1/3 train_loss:9.0\n", 3, 100), [0, 100, 200, 300])

    def test_tokens_to_reach_interpolates_in_tokens(self):
        tokens = br.cumulative_tokens(LOG, 6, 512)
        points = [(2, 8.0), (4, 6.0), (6, 5.0)]
        self.assertEqual(br.tokens_to_reach(points, tokens, 7.0), 512 + 0.5 * (1536 - 512))  # halfway 2 -> 4
        self.assertEqual(br.tokens_to_reach(points, tokens, 5.5), 1536 + 0.5 * (3072 - 1536))
        self.assertEqual(br.tokens_to_reach(points, tokens, 9.0), 512)  # the first evaluation already
        self.assertIsNone(br.tokens_to_reach(points, tokens, 4.0))


class Report(unittest.TestCase):
    def results(self):
        fixed = br.cumulative_tokens("", 4, 100)
        staged = br.cumulative_tokens("# batch: step 1 (schedule step 0) T=50 tokens per sequence\n"
                                      "# batch: step 3 (schedule step 2) T=150 tokens per sequence\n", 4, 100)
        return {
            "a": [{"seed": 1, "points": [(2, 6.0), (4, 4.0)], "tokens": staged},
                  {"seed": 2, "points": [(2, 6.2), (4, 4.2)], "tokens": staged}],
            "b": [{"seed": 1, "points": [(2, 7.0), (4, 5.0)], "tokens": fixed},
                  {"seed": 2, "points": [(2, 7.4), (4, 5.4)], "tokens": fixed}],
        }

    def test_means_common_loss_and_ratio(self):
        report = br.markdown_report(self.results())
        self.assertIn("| 2 | 100 | 6.1000 | 200 | 7.2000 |", report)  # a: 50 + 50 tokens; b: 2 x 100
        self.assertIn("| 4 | 400 | 4.1000 | 400 | 5.2000 |", report)
        # Common loss: b's mean final 5.2. a's mean curve 6.1 -> 4.1 reaches it 0.45 of the way from 100 to 400.
        self.assertIn("Common loss (the worst mean final val loss): 5.2000", report)
        self.assertIn("| a | 400 | 4.1000 ± 0.1414 | 235 |", report)
        self.assertIn("| b | 400 | 5.2000 ± 0.2828 | 400 |", report)
        self.assertIn(f"relative to a: b {400 / 235:.2f}x.", report)
        # Per seed against 5.2: a's seed 1 at 100 + 0.4 x 300 = 220, seed 2 at 100 + 0.5 x 300 = 250; b's seed 1
        # at 200 + 0.9 x 200 = 380, seed 2 never (5.4).
        self.assertIn("| 220, 250 |", report)
        self.assertIn("| 380, never |", report)

    def test_welch_t_of_the_final_losses(self):
        t = (4.1 - 5.2) / math.sqrt(0.02 / 2 + 0.08 / 2)
        self.assertIn(f"Welch's t = {t:.2f}", br.markdown_report(self.results()))


if __name__ == "__main__":
    unittest.main()
