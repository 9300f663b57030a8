#!/usr/bin/env python3
"""Mutation tests of the kernels: runs the emulated fp32 and bf16 kernel tests and the FP8 tests (kernels_fp32_emu,
kernels_bf16_emu, fp8_emu, built with LLMC_KERNEL_MUTANTS) on the tests that guard a mutant site, once with no
mutant, where they must pass, and once per mutant (LLMC_KERNEL_MUTANT=name, one plausible bug switched on in
llmc/kernels), where the tests that guard that kernel must fail (a kernel the emulation stops, e.g. with copies left
in flight, counts as caught). Also checks that every LLMC_MUTANT site in the kernel sources has an entry here.
Exit 0 when every mutant is caught, 1 otherwise.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

# mutant name -> the tests that must catch it (a gtest filter)
MUTANTS = {
    "rmsnorm.eps": "RmsNormKernel.ForwardMatchesReference",           # eps 1e-5 instead of FLT_EPSILON
    "rmsnorm.no_projection": "RmsNormKernel.Backward*",               # dx without the -n mean(dy n) term
    "rope_tables.next_position": "RopeTables.*",                       # tables one position ahead
    "qk_norm_rope.partial_group": "QkNormRopeKernel.ForwardAndBackward*",  # head norm over half the lanes
    "qk_norm_rope.forward_rotation": "QkNormRopeKernel.ForwardAndBackward*",  # backward not transposed
    "relu_squared.no_factor_two": "ReluSquaredKernel.*",               # d/dx relu(x)^2 = x
    "softcap.no_cap_derivative": "SoftcapCrossEntropyKernel.LossAndInPlace*",  # dz = dlogits
    "smear.no_next_row": "SmearKernel.*",                              # de[t] misses lambda g[t+1] dout[t+1]
    "smear.no_barrier": "SmearKernel.*",                               # per-warp partials read before written
    "tied_transpose.no_barrier": "TiedTransposeKernel.*",              # a tile column read before it is staged
    "attention_gate.drop_last_chunk": "AttentionGateKernel.*",         # dw misses the last row chunk
    "residual_mix.drop_first_partial": "MixKernel.*",                  # scalar grads miss block 0's partial
    "embedding.previous_token": "EmbeddingKernel.FourGathers*",        # gathers the previous token's rows
    # the scatter-add of both embeddings' backwards (token_scatter.cuh): caught by both kernels' tests
    "token_scatter.drops_first_partial": "EmbeddingKernel.ScatterAdd*:EncoderKernel.Backward*",  # a crossing run loses its first chunk
    "simple_attention.window_plus_one": "SimpleAttentionKernel.*",     # the window admits one key too many
    "simple_attention.decode_lane_dot": "SimpleAttentionKernel.MatchesReference*",  # a decode lane's own dims only
    "simple_attention.dv_accumulate_inverted": "SimpleAttentionKernel.MatchesReference*",  # dv stored for added
    "scalar_vector.overwrite": "ScalarVectorKernel.*",                 # gradients overwritten, not added
    # the GPT-2 kernels of issue 15
    "fold.keeps_group_counter": "LayerNormKernel.Backward*:BiasGradKernel.*",  # the next launch never finishes
    "layernorm_backward.uninitialised_accumulators": "LayerNormKernel.Backward*",  # shared sums not zeroed
    "column_sums.no_barrier": "BiasGradKernel.*",                      # warp sums read before they are written
    "token_scatter.ignores_crossing_end": "EncoderKernel.Backward*:EmbeddingKernel.ScatterAdd*",  # a run's first chunk added as if whole
    "softmax.exp2_without_log2e": "ClassifierKernel.LossAndInPlace*",  # exp2(x - max) for exp(x - max)
    "mean_of_losses.drops_last_warp": "ClassifierKernel.MeanOfLosses*",  # the step loss misses 1/32 of the rows
    "global_norm.first_segment_only": "GlobalNormKernel.MatchesDoubleSum*",  # later buckets left out of the norm
    "clip_scale.scales_infinity": "GlobalNormKernel.ClipScale",        # an infinite norm zeroes the update
    "adamw.first_segment_decay": "AdamWKernel.SegmentsInOneLaunch*",   # one weight decay for the whole shard
    # the 2026-07-17 record's kernels
    "mtp.softmax_weight_present_only": "MtpCrossEntropyTest.LossAndInPlace*",  # the record's quirk dropped
    "xsa.no_norm_derivative": "XsaKernel.Backward*",                   # dv misses d|v|^2's term
    "bigram_sign.current_token_only": "BigramSignKernel.EachRow*",     # sign row from tokens[t] alone
    "sparse_rows.first_sender_only": "SparseRowsKernel.SumIs*",        # a row's first contribution alone
    "sparse_rows.clear_keeps_addend": "SparseRowsBookkeeping.AddRows*",  # the saved rows not cleared
    "value_gate.no_factor_two": "ValueEmbedGateKernel.Backward*",      # d(2 sigmoid) taken as d sigmoid
    "value_gate.store_adds_old": "ValueEmbedGateKernel.BackwardMatchesCentralDifferencesStored",  # a first writer reads dve
    "dc.window_plus_one": "DcAttentionKernel.ForwardMatches*",         # one key more than the window
    "dc_mix_weights.sum_not_mean": "DcAttentionKernel.MixWeights*",    # w1 over the root of the sum, not the rms
    "token_mix.gate_dot_times_weight": "TokenMixKernel.Backward*",     # the gate's gradient scaled by the gate
    "gate_mlp_output.bias_unscaled": "GateMlpOutput.Forward*",         # s in + b instead of s (in + b)
    "gate_mlp_output.bias_grad_unscaled": "GateMlpOutput.Backward*",   # db without the scale
    "dc_mix_weights.no_norm_gradient": "DcAttentionKernel.MixWeightsBackward*",  # the rms treated as a constant
    "pair_rope.offset_gradient_misses_last": "QkNormPairRope.Backward*",  # row T-2's k misses row T-1's dy
    "kv_cache.partials_no_barrier": "*KvCacheAttention*",                 # the groups' partials summed too early
    "head_gate.first_head_gate": "HeadGateKernel.*",                   # every head scaled by head 0's gate
    "head_gate.half_group_dot": "HeadGateKernel.Backward*",            # a gate's gradient over half its head
    # issue 27's fusions
    "residual_norm.extra_streams_unweighted": "ResidualNormKernel.*Bitwise",  # the gate columns ignored
    "residual_norm_backward.no_barrier": "ResidualNormKernel.Backward*",  # warps' dots read before written
    "wgmma_gemm.ring_without_barrier": "WgmmaGemm.ProductMatchesReference",  # a slot read before others' copies land
    "wgmma_gemm.products_not_waited": "WgmmaGemm.ProductMatchesReference",  # a slot refilled under its products
    "wgmma_gemm.rope_second_half_sign": "WgmmaGemm.QkvRope*",          # the second half rotated the wrong way
    "wgmma_fp8_gemm.tile_sum_not_waited": "WgmmaFp8Gemm.ReluSquared*",  # a k-tile's sum promoted before it is done
    "residual_norm_backward.first_warp_only": "ResidualNormKernel.Backward*",  # a block's partial from one row
}

# The same in the emulated bf16 kernel tests (kernels_bf16_emu): the head-128 window attention exists only there.
BF16_MUTANTS = {
    "window_attention.forward_ungated": "WindowAttentionGate.*",       # the forward store writes O, not g O
    "window_attention.logit_grad_times_gate": "WindowAttentionGate.*",  # delta g (1 - g) for delta (1 - g)
    "window_attention.dv_ungated": "WindowAttentionGate.*",            # dV from P dout, not P g dout
    "window_attention.dq_ungated": "WindowAttentionGate.*",            # dQ's dP from dout, not g dout
    "window_attention.norm_rope_half_row_dot": "WindowAttentionNormRope.*",  # mean(dn n) over two of four lanes
    "window_attention.pair_rope_half_row_dot": "WindowAttentionPairNormRope.*",  # the same in the pair RoPE store
    "window_attention.dve_without_b": "WindowAttentionValueMix.*",     # dve += dV, not b dV
    "window_attention.value_mix_sums_no_barrier": "WindowAttentionValueMix.*",  # warps' sums read before written
    "window_attention.value_mix_drops_warp0": "WindowAttentionValueMix.*",  # a block's partial misses warp 0
    "window_attention.b_sum_from_a_partials": "WindowAttentionValueMix.*",  # d b summed from dV v_raw
    "window_attention.dv_accumulate_inverted": "WindowAttentionAccumulatedDv.*",  # dv stored for added and back
    "window_attention.forward_copies_no_barrier": "*WindowAttentionTest.*",  # a buffer refilled while others read it
    "window_attention.dkdv_copies_not_waited": "*WindowAttentionTest.*",  # the query tile read before it lands
}

# The FP8 head's and the FP8 MLP's sites, in the FP8 tests (fp8_emu).
FP8_MUTANTS = {
    "fp8_cast_transpose.no_barrier": "Fp8ModelCheck.*",                # a column read before its codes are staged
    "fp8_head.dx_without_weight_scale": "Fp8ModelCheck.*",             # dx without w_s
    "fp8_head.fixed_grad_scale": "Fp8ModelCheck.*",                    # g_s the record's 1/448 whatever the loss scale
    "fp8_head.in_out_weight_grad_unswapped": "Fp8ModelCheck.*",        # the (C, V) weight gradient's shape not swapped
    "fp8_head.codes_not_transposed": "Fp8ModelCheck.*",                # g8t read unwritten
    "fp8_mlp.block_max_no_barrier": "Fp8ModelCheck.*",                 # warp 0 reads the warps' maxima too early
}


def mutant_sites(kernels_dir):
    names = set()
    for path in glob.glob(os.path.join(kernels_dir, "*.cuh")):
        with open(path) as f:
            names.update(re.findall(r'LLMC_MUTANT\("([^"]+)"', f.read()))
    return names


def run(binary, gtest_filter, mutant):
    env = dict(os.environ)
    env.pop("LLMC_KERNEL_MUTANT", None)
    if mutant:
        env["LLMC_KERNEL_MUTANT"] = mutant
    result = subprocess.run([binary, f"--gtest_filter={gtest_filter}"], env=env, capture_output=True, text=True,
                            timeout=240)
    return result.returncode, result.stdout + result.stderr


def check_binary(binary, mutants):
    """Runs the guarding tests without a mutant (they must pass), then under each mutant (they must fail)."""
    all_filters = ":".join(sorted(set(mutants.values())))
    code, output = run(binary, all_filters, None)
    if code != 0:
        print(f"FAIL the tests of {binary} fail without any mutant:\n{output[-3000:]}")
        return False
    if re.search(r"\[==========\] 0 tests", output):
        print(f"FAIL the filters of {binary} select no test")
        return False
    print(f"ok   no mutant: the guarding tests of {os.path.basename(binary)} pass")
    ok = True
    for mutant, gtest_filter in mutants.items():
        code, output = run(binary, gtest_filter, mutant)
        if re.search(r"\[==========\] 0 tests", output):
            print(f"FAIL {mutant:42s} its filter {gtest_filter} selects no test")
            ok = False
            continue
        failed = sorted(set(re.findall(r"\[  FAILED  \] ([A-Za-z][^\s,]*)", output)))
        caught = code != 0 and (failed or "error" in output.lower())
        verdict = 'caught by ' + ', '.join(failed) if failed else 'exit ' + str(code)
        print(f"{'ok  ' if caught else 'FAIL'} {mutant:42s} {verdict}")
        ok &= bool(caught)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True, help="kernels_fp32_emu (the kernel tests built with LLMC_KERNEL_MUTANTS)")
    parser.add_argument("--bf16-binary", required=True, help="kernels_bf16_emu (also built with LLMC_KERNEL_MUTANTS)")
    parser.add_argument("--fp8-binary", required=True, help="fp8_emu (also built with LLMC_KERNEL_MUTANTS)")
    parser.add_argument("--kernels", required=True, help="llmc/kernels, to find every LLMC_MUTANT site")
    args = parser.parse_args()
    ok = True
    sites = mutant_sites(args.kernels)
    tables = set(MUTANTS) | set(BF16_MUTANTS) | set(FP8_MUTANTS)
    if sites != tables:
        print(f"FAIL mutant sites in the sources but not here {sorted(sites - tables)}, "
              f"here but not in the sources {sorted(tables - sites)}")
        ok = False
    ok &= check_binary(args.binary, MUTANTS)
    ok &= check_binary(args.bf16_binary, BF16_MUTANTS)
    ok &= check_binary(args.fp8_binary, FP8_MUTANTS)
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
