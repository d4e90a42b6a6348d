"""Shared test configuration.

The suite deliberately does *not* turn on ``jax_enable_x64`` globally: jaxdp
must give float64 results under JAX's default (32-bit) configuration, and the
tests exercise exactly that.  Tests that need float64 *inputs* (finite
differences, vmapped parameter arrays) build them inside ``_helpers.x64()``.
"""

import os
import subprocess
import sys
import tempfile

import jax
import pytest
from _helpers import QUICK_CPU_FLAG
from hypothesis import HealthCheck, settings

from jaxdp.numerics import program_cache


def _quick_cpu_codegen():
    """Compiles the suite's programs with XLA:CPU's elemental emitters (``--xla_cpu_use_fusion_emitters=false``,
    jaxdp's ``program_cache.QUICK_COMPILE``) where the installed XLA has that flag.

    Compilation is most of the suite's cold time, and these emitters compile jaxdp's chains of special functions
    20-30 % faster (``benchmarks/results/test_suite.md``) into the same arithmetic.  The flag must be in
    ``XLA_FLAGS`` before the backend starts, and an XLA that does not know a flag aborts the process, so a child
    process tries it first; the controller decides once, and the xdist workers and the tests' own subprocesses
    inherit its environment, except the user-mode matrix's user side (``tests/test_user_mode.py``), which compiles
    with XLA's defaults as users do, against a reference compiled here.  ``JAXDP_TEST_XLA_DEFAULT=1`` keeps XLA's
    defaults everywhere (the newest JAX has no such flag: its CI step compiles as users do), and a choice of the
    flag already in ``XLA_FLAGS`` is kept."""
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("JAXDP_TEST_XLA_DEFAULT") == "1" or QUICK_CPU_FLAG.split("=")[0] in flags:
        return
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"{flags} {QUICK_CPU_FLAG}".strip()}
    try:  # (exactly what the workers will do: the flag in XLA_FLAGS, one compiled program)
        ok = (
            subprocess.run(
                [sys.executable, "-c", "import jax; jax.jit(lambda x: x + 1)(0.0).block_until_ready()"],
                env=env,
                capture_output=True,
                timeout=120,
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:
        ok = False
    if ok:
        os.environ["XLA_FLAGS"] = env["XLA_FLAGS"]
    else:
        os.environ["JAXDP_TEST_XLA_DEFAULT"] = "1"  # (decided: the workers need not try again)


# (before anything starts JAX's backend: importing jax and jaxdp does not)
_quick_cpu_codegen()

# A persistent compilation cache shared by the xdist workers and across test modules: the
# calibration and certified programs are compiled by several modules (and doctests), and each
# compile takes 10-60 s on two cores.  The key covers the program, the options and the JAX
# version, so a stale entry is never used.  Every program is kept, the small ones too: the eager reference paths
# compile thousands of op-by-op programs, which a warm run would otherwise compile again.
_XLA_CACHE = os.environ.get("JAXDP_TEST_XLA_CACHE", os.path.join(tempfile.gettempdir(), "jaxdp-test-xla-cache"))
jax.config.update("jax_compilation_cache_dir", _XLA_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
# the subprocesses of test_user_mode.py, test_float64.py and the command-line tests read only the environment:
# the same cache reaches them there (without it each child compiled every program cold)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _XLA_CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# jaxdp's own cache of compiled accountant programs (jaxdp/numerics/_program_cache.py) beside it, for this process
# and its children: never the user's ~/.cache, and cold where the XLA cache is
os.environ.setdefault("JAXDP_CACHE_DIR", os.path.join(_XLA_CACHE, "jaxdp"))

settings.register_profile(
    "jaxdp",
    max_examples=15,
    deadline=None,
    # the conformance suite's property tests are inherited by one class per accountant
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    derandomize=True,
)
settings.load_profile("jaxdp")


# The default suite's slowest tests (each 12-64 s on 2 cores, measured 2026-11-25 with --durations=0), run
# with ``-m slow`` only: the suite took 23.5 min with them.  (Conformance checks are listed in their class's
# ``slow_checks`` instead.)  Each one's concern keeps a faster check in the
# default run (the same check on another accountant, or a cheaper case); compile time dominates them all.
SLOW_TESTS = {
    "tests/test_characteristic.py::test_gradients_match_finite_differences_on_reference_settings[tiny_delta_0.5_1e-3-100]",
    "tests/test_montecarlo.py::test_one_device_and_four_devices_give_the_same_estimate",  # 56 s
    "tests/test_schedules.py::test_stacked_equals_part_by_part[characteristic]",  # 44 s
    "tests/test_montecarlo.py::test_second_moment_bounds_dominate_the_empirical_second_moment",  # 35 s
    "tests/test_fixed_batch.py::test_cli_verify_online_and_sweep_take_fixed_batches",  # 28 s
    "tests/test_montecarlo.py::test_heterogeneous_composition_and_mixture_against_certified",  # 27 s
    "tests/test_schedules.py::test_stacked_equals_part_by_part[delta2-certified]",  # 26 s
    "tests/test_user_mode.py::test_cheap_accountants_under_user_transformations[delta-rdp]",  # 23 s
    "tests/test_soundness.py::test_lattice_split_rounds_up_where_the_q_mass_underflows",  # 23 s
    "tests/test_schedules.py::test_stacked_equals_part_by_part[rdp]",  # 21 s
    "tests/test_cli.py::test_calibrate_sigma_json",  # 21 s
    "tests/test_cli.py::test_calibrate_q_and_steps_human",  # 19 s
    "tests/test_saddlepoint.py::test_terms_are_consistent",  # 19 s
    "tests/test_certified.py::test_fft_error_bound_covers_the_actual_rounding_error",  # 17 s
    "tests/test_interop.py::test_accountant_matches_dp_accounting_pld_within_its_discretisation[schedule]",  # 17 s
    "tests/test_montecarlo.py::test_epsilon_gradient_by_the_implicit_function_matches_finite_differences",  # 17 s
    "tests/test_user_mode.py::test_renyi_dp_under_user_transformations",  # 16 s
    "tests/test_certified.py::test_chernoff_term_bounds_the_mass_above_the_window",  # 16 s
    "tests/test_fixed_batch.py::test_fixed_batch_against_dp_accounting_pld",  # 16 s
    "tests/test_quadrature.py::test_cgf_derivatives_are_smooth_and_convex_along_t",  # 14 s
    "tests/test_nufft.py::test_matches_the_direct_sum[4096]",  # 14 s
    "tests/test_soundness.py::test_resolution_check_passes_where_the_rule_is_accurate",  # 14 s
    "tests/test_characteristic.py::test_vmap_over_epsilon_matches_loop",  # 14 s
    "tests/test_certified_properties.py::test_one_direction_between_dp_accounting_pld_bounds[add]",  # 13 s
    "tests/test_cli.py::test_human_report",  # 13 s
    "tests/test_soundness.py::test_tilted_variance_without_cancellation",  # 12 s
    "tests/test_certified.py::test_unconverged_cell_edges_make_the_step_vacuous",  # 12 s
    "tests/test_calibrate.py::test_sampling_prob_gradients_match_finite_differences",  # 51 s
    "tests/test_calibrate.py::test_arrays_equal_the_loop_and_keep_shape",  # 27 s
    "tests/test_calibrate.py::test_mechanism_families[_schedule-2]",  # 21 s
    "tests/test_calibrate.py::test_num_steps_is_the_largest_count_the_certified_check_passes",  # 14 s
    # 240 s with the split estimate as "saddlepoint"; test_mixture_values_under_a_users_jit_with_x64_off stays
    "tests/test_fixed_batch.py::test_mixtures_under_a_users_jit_grad_and_vmap_with_x64_off",
    # 2026-11-26, the split estimate's programs (cold cache, 2 cores): test_saddlepoint_split.py keeps a schedule
    # gradient and the stacked schedules
    "tests/test_schedules.py::test_stacked_equals_part_by_part[saddlepoint]",  # 120 s
    "tests/test_schedules.py::test_schedule_gradient_matches_finite_differences",  # 83 s
    # 2026-11-27 (issue 42): the calibrators' doctests compile the calibrations test_calibrate.py moved to -m slow
    # (61 s and 58 s in a cold CI run); calibrate_noise_multiplier's doctest stays
    "jaxdp/calibration/_calibrate.py::jaxdp.calibration._calibrate.calibrate_sampling_prob",
    "jaxdp/calibration/_calibrate.py::jaxdp.calibration._calibrate.calibrate_num_steps",
    # 2026-11-27 (issue 42, second cut; CPU-s of trace + lower + compile in a cold run on a loaded machine):
    # forms a cheaper default test already checks
    "tests/test_calibrate.py::test_default_method_gradients_match_finite_differences",  # 231: the implicit
    # gradient is checked through delta2 (test_implicit_gradients_match_finite_differences)
    "tests/test_calibrate.py::test_split_estimate_calibrates_where_delta_2_overshoots",  # 138
    "tests/test_calibrate.py::test_vmap_equals_the_array_call",  # 84 (arrays: test_jit_equals_eager_...)
    # 182: zero weights stay checked through rdp and delta2 (and test_padded_gradients_...)
    "tests/test_zero_weight.py::test_padding_with_zero_weights_changes_no_value[certified-fast-add_or_remove-fixed_batch]",
    "tests/test_saddlepoint_split.py::test_indicator_flags_an_estimate_that_depends_on_the_split_point[1]",  # 161
    "tests/test_saddlepoint_split.py::test_group_mixtures[(1.5, 0.0001, 16, 100000, 1e-08)-2.0240404]",  # 104
    "tests/test_saddlepoint_split.py::test_group_mixtures[(2.0, 0.005, 8, 3000, 1e-10)-8.0393759]",  # 72
    "tests/test_saddlepoint_split.py::test_group_gradient_through_the_grid_of_jumps[1.327-0.0147-4-5-0.58646]",  # 102
    "tests/test_saddlepoint_split.py::test_heterogeneous_schedules[([1.0, 1.3, 0.9], [0.001, 0.002, 0.0005], "
    "[4000, 3000, 3000], 1e-06)-0.5704908]",  # 69
    "tests/test_characteristic.py::test_agrees_with_the_saddle_point_accountant[1.0-0.02-1000]",  # 72 (+ 2 more)
    "tests/test_characteristic.py::test_agrees_with_the_saddle_point_accountant[0.8-0.005-5000]",
    "tests/test_characteristic.py::test_agrees_with_the_saddle_point_accountant[2.0-0.05-300]",
    "tests/test_characteristic.py::test_reference_epsilon_rows[group_cifar_sigma2-8-2000]",  # 53 (sigma1-2 stays)
    # issue 42, third cut (programs no other default test compiles):
    # the few-step sums' gradient, a program of its own; the split estimate's gradient stays on the other rows
    # and the conformance suite's d eps / d sigma, this setting's value in test_few_steps_at_tiny_q_against_...
    "tests/test_saddlepoint_split.py::test_gradients_match_finite_differences[2.17-0.001-2-1e-12]",
    "tests/test_saddlepoint_split.py::test_gradients_match_finite_differences[0.7-0.1-2-1e-06]",  # same program
    # saddlepoint_terms at three steps; test_a_program_holds_the_few_step_sums_... asserts the same delta
    "tests/test_saddlepoint_split.py::test_three_steps_delta_and_terms",
    # a stacked schedule's delta at few steps; the Poisson-binomial count it regressed on stays checked by
    # test_count_of_jumps_over_heterogeneous_steps_is_poisson_binomial and the [0.42, 0.54, 0.58] schedule row
    "tests/test_saddlepoint_split.py::test_a_schedule_is_never_below_its_own_first_step",
    # certified's own one-step Gaussian program; the same cause (a saddle point past the old bracket, in shared
    # search code) stays checked through certified-fast and delta2-certified
    "tests/test_soundness.py::test_tiny_noise_gaussian_at_delta_1e30[certified]",
    # issue 42, fourth cut: a move leaves the default run only when every default user of its programs goes too.
    # The split estimate's stacked program in a one-segment stack (its stacks: test_saddlepoint_split's schedule
    # rows) and characteristic's (the stack = i.i.d. identity is Composition's, checked on delta2-certified)
    "tests/test_schedules.py::test_one_segment_stack_equals_the_mechanism[saddlepoint]",
    "tests/test_schedules.py::test_one_segment_stack_equals_the_mechanism[characteristic]",
    # full-lattice certified's remove-direction program (one program for both); one direction against the
    # independent lower bound stays in the adversarial sample's psg/remove and psg/add cases (certified-fast)
    "tests/test_certified_properties.py::test_one_direction_between_dp_accounting_pld_bounds[remove]",
    "tests/test_certified_properties.py::test_remove_direction_between_prv_accountant_bounds",
    # certified-fast's one-step programs (Gaussian; PSG add, epsilon and log delta): the same causes sit in search
    # code certified-fast shares with delta2-certified, whose forms stay; the adversarial sample holds psg/add
    # and psg_lmax/add through certified-fast
    "tests/test_soundness.py::test_tiny_noise_gaussian_at_delta_1e30[certified-fast]",
    "tests/test_soundness.py::test_add_direction_with_little_noise[certified-fast]",
    "tests/test_soundness.py::test_add_direction_small_q_tiny_delta[certified-fast]",
    "tests/test_soundness.py::test_delta_near_the_largest_loss_of_the_add_direction[certified-fast]",
    # characteristic on a 3-component group mixture; the reference rows of group mixtures stay through
    # test_fixed_batch.py::test_group_curve_matches_the_reference_rows_... and the group_curve doctest
    "tests/test_characteristic.py::test_reference_epsilon_rows[group_cifar_sigma1-2-2000]",
    # calibrate_num_steps' infeasible message: the same message from the same function in
    # test_cli.py::test_calibrate_bad_input[argv4-...] (the rdp pair, shared with test_max_steps_and_sigma_max)
    "tests/test_calibrate.py::test_even_one_step_exceeds_the_budget",
    # the default calibration's doctest: test_tight_sigma_for_the_reference_budget makes the same call, with more
    # assertions
    "jaxdp/calibration/_calibrate.py::jaxdp.calibration._calibrate.calibrate_noise_multiplier",
    # two Monte Carlo programs of their own; each estimator against an independent reference stays
    # (test_gaussian_composition_matches_closed_form, test_subsampled_gaussian_matches_reference_table), and
    # add-or-remove estimates sample both directions there
    "tests/test_montecarlo.py::test_estimators_agree_with_each_other",
    "tests/test_montecarlo.py::test_each_direction_against_dp_accounting[remove]",
    "tests/test_montecarlo.py::test_each_direction_against_dp_accounting[add]",
    # issue 42, fifth cut (each compiles a program no default test shares): the calibrators' grid, implicit
    # gradients and jit forms (test_tight_sigma_for_the_reference_budget keeps the concrete calibration,
    # test_user_mode's calibrators under jit(grad) the implicit gradient)
    "tests/test_calibrate.py::test_never_overshoots_on_a_grid_of_budgets",
    "tests/test_calibrate.py::test_implicit_gradients_match_finite_differences[delta2]",
    "tests/test_calibrate.py::test_jit_equals_eager_and_no_recompilation",
    # characteristic's certified fallback in a program of its own; the conservative answer where the contour cannot
    # resolve the law stays (test_unresolvable_spike_is_flagged_and_answered_conservatively)
    "tests/test_characteristic.py::test_unreliable_regime_answers_with_the_certified_bound",
    # certified vmapped over a grid (vmap stays on rdp, exact, the split estimate and Monte Carlo)
    "tests/test_certified.py::test_bound_grows_with_steps_and_q_and_shrinks_with_sigma",
    # the split estimate's log-delta gradient (its epsilon gradient stays, and this check on delta2-certified)
    "tests/test_saddlepoint.py::test_gradient_finite_where_one_direction_has_zero_delta[saddlepoint]",
    # the split estimate's terms program (saddlepoint_terms' doctest keeps the entry point) and a second group row
    "tests/test_saddlepoint_split.py::test_saddlepoint_terms_report_the_estimate_and_a_small_indicator",
    "tests/test_saddlepoint_split.py::test_group_mixtures[(0.84, 0.00219, 16, 320, 3.1e-09)-13.4268028]",
    # padded gradients (padding's values stay checked on rdp and delta2)
    "tests/test_zero_weight.py::test_padded_gradients_match_the_unpadded_ones[delta2]",
    # Monte Carlo: the verifier in a calibration, 1e-10 (a long run), the one-step tilt's reference row (the
    # full tilt's stays)
    "tests/test_montecarlo.py::test_certify_evr_in_a_calibration",
    "tests/test_montecarlo.py::test_tilted_sees_delta_1e10_where_simple_sees_nothing",
    "tests/test_montecarlo.py::test_subsampled_gaussian_matches_reference_table[tilted-one]",
    # fixed batches: the calibration through the command line and monotonicity in two sizes (the group curve
    # against the reference rows stays)
    "tests/test_fixed_batch.py::test_cli_calibrate_fixed_batch",
    "tests/test_fixed_batch.py::test_monotone_in_group_size_and_batch_size",
    # certified-fast's composed tiny-noise Gaussian; delta2-certified's stays (the search code they share)
    "tests/test_soundness.py::test_tiny_noise_gaussian_composed_at_delta_1e169[certified-fast]",
    # four of the samplers' five moment checks, each run op by op; remove/psg stays
    "tests/test_mechanisms.py::test_sampler_moments_match_cgf_derivatives[add-psg]",
    "tests/test_mechanisms.py::test_sampler_moments_match_cgf_derivatives[remove-mog]",
    "tests/test_mechanisms.py::test_sampler_moments_match_cgf_derivatives[add-mog]",
    "tests/test_mechanisms.py::test_sampler_moments_match_cgf_derivatives[remove-laplace]",
    # issue 42, sixth cut, read off the profile's sharing table (benchmarks/suite_profile.py: what leaving the
    # default run saves, counting only the programs no default test shares):
    # certified's log-delta gradient (100 s, its two gradient programs no other test shares); the gradient rule at
    # the boundary stays checked through rdp, exact, saddlepoint, delta2-certified and delta2, and
    # certified's own derivative pieces through test_wide_cells_loop_has_the_derivative_of_its_values
    "tests/test_certified.py::TestCertifiedConformance::test_grad_delta_wrt_sigma",
    # certified-fast's own jitted program (32 s); no recompilation stays checked on certified, rdp, exact and
    # the saddle-point methods (certified-fast under a user's jit in test_user_mode: -m slow since the seventh cut)
    "tests/test_conformance.py::TestCertifiedFastConformance::test_no_recompilation_on_new_values",
    # rdp's log-delta gradient (its epsilon gradient and the grid stay)
    "tests/test_conformance.py::TestRdpConformance::test_grad_delta_wrt_sigma",
    # Monte Carlo forms whose concern a cheaper default test keeps: subsampled gradients (each estimator's gradient
    # against the closed form stays), the chunked reduction (the closed-form checks draw a partial last chunk), the
    # subsampled online curve (test_online.py's coverage at the paper's setting stays), q = 1 drawn
    # as the Gaussian (13 programs; the exact tilt's range and mean stay checked on both families)
    "tests/test_montecarlo.py::test_subsampled_gradients_match_finite_differences_of_an_independent_accountant",
    "tests/test_montecarlo.py::test_chunked_reduction_equals_one_vectorised_pass",
    "tests/test_montecarlo.py::test_online_curve_of_a_subsampled_gaussian_against_an_independent_accountant",
    "tests/test_evr_tilt.py::test_a_subsampled_gaussian_with_q_1_is_drawn_as_the_gaussian",
    # the online curve's refusals through the command line (the library's refusal stays:
    # test_steps_the_samples_cannot_vouch_for_are_refused; the command line's online output: test_cli_verify_and_online)
    "tests/test_online.py::test_the_command_line_says_which_steps_are_refused",
    # exact's log delta in a user's transformations (its epsilon there stays)
    "tests/test_user_mode.py::test_cheap_accountants_under_user_transformations[delta-exact]",
    # rdp's fixed-batch program padded with zero weights (23 s; padding stays checked through delta2 on a
    # fixed batch, a Poisson group and a hand-made mixture), and the split estimate's vmap against a loop of eager
    # calls (22 s of eager calls; vmap == loop on the same program stays in TestSaddlepointConformance)
    "tests/test_zero_weight.py::test_padding_with_zero_weights_changes_no_value[rdp-add_or_remove-fixed_batch]",
    "tests/test_saddlepoint_split.py::test_vmap_over_configurations_equals_the_loop",
    # issue 42, seventh cut (also: the adversarial sample and the heavy accountants under a user's jit keep one
    # method each in the default run, rdp's conformance forms that are _api's wrapping go, and Monte Carlo's vmap
    # under a user's transformation, all marked where they are defined):
    # where the split estimate's program holds the few-step sums (a property of the program's make-up; the values
    # at few steps stay in test_three_steps_where_characteristic_is_one_percent_high and the small-epsilon corners)
    "tests/test_saddlepoint_split.py::test_a_program_holds_the_few_step_sums_only_where_its_step_counts_need_them",
    # characteristic's public terms under a user's jit and grad (their values against the numpy bracket stay)
    "tests/test_characteristic.py::test_public_terms_inside_a_users_jit_and_grad_with_x64_off",
    # each Monte Carlo estimator keeps its closed-form Gaussian check; Laplace and the gradient keep the default
    # estimator (tilted)
    "tests/test_montecarlo.py::test_laplace_matches_closed_form[simple]",
    "tests/test_montecarlo.py::test_laplace_matches_closed_form[tilted-one]",
    "tests/test_montecarlo.py::test_delta_gradient_matches_closed_form_derivative[simple]",
    "tests/test_montecarlo.py::test_delta_gradient_matches_closed_form_derivative[tilted-one]",
    # the online curve's coverage at q 0.01 (the paper's setting, q 0.001 at delta 1e-9, stays)
    "tests/test_online.py::test_online_curve_covers_the_truth_at_q_001",
    # two of the three one-step Berry-Esseen settings, three of the six small-epsilon corners of the split
    # estimate against the FFT oracle, one of the three unresolvable spikes (each a run of seconds of its own)
    "tests/test_soundness.py::test_berry_esseen_term_covers_the_one_step_error[0.7-0.3]",
    "tests/test_soundness.py::test_berry_esseen_term_covers_the_one_step_error[3.0-0.5]",
    "tests/test_fft_reference.py::test_split_estimate_small_epsilon_corners[s2-q1e-2-T3]",
    "tests/test_fft_reference.py::test_split_estimate_small_epsilon_corners[s2-q1e-2-T5]",
    "tests/test_fft_reference.py::test_split_estimate_small_epsilon_corners[s2.66-q6.9e-4-T16]",
    "tests/test_characteristic.py::test_unresolvable_spike_is_flagged_and_answered_conservatively[1.0-0.0001-30]",
    # an epsilon solve under a user's jit and jit(grad) in a child process (22 s); the default run keeps the
    # calibrators' jit(grad) there (the same delta_2 solve, differentiated through the calibration), exact under
    # jit, and delta_2 under a user's jit in-process (TestSaddlepointDelta2Conformance)
    "tests/test_user_mode.py::test_cheap_accountants_under_user_transformations[epsilon-delta2]",
}


# -- where the suite's time goes (JAXDP_TEST_PROFILE=DIR): per test, the seconds JAX spent tracing, lowering and
# compiling, and the programs it compiled (by name); benchmarks/suite_profile.py reads the files
_PROFILE_DIR = os.environ.get("JAXDP_TEST_PROFILE")
_profile = {"test": "<collection>", "tests": {}, "clears": []}


def _record(test=None):
    """The profile's record of ``test`` (the test running now by default), made on first use."""
    return _profile["tests"].setdefault(
        _profile["test"] if test is None else test, {"compile": 0.0, "trace": 0.0, "lower": 0.0, "programs": []}
    )


def _on_jax_duration(event, duration, **kwargs):
    kind = {
        "/jax/core/compile/backend_compile_duration": "compile",
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    }.get(event)
    if kind is None:
        return
    rec = _record()
    rec[kind] += duration
    if kind == "compile":
        # (the persistent-cache key of the miss just logged, when there is one: the compile that follows is its)
        rec["programs"].append([str(kwargs.get("fun_name", "?")), round(duration, 3), _profile.pop("pending", None)])


def _record_cache_key(kind):
    """Wraps JAX's persistent-cache log calls to record, per test, the key of each program it compiled (``miss``)
    or loaded (``hit``): which tests share a program, so that a test leaves the default run only with every
    default user of its programs (``benchmarks/suite_profile.py``'s sharing table)."""
    from jax._src import compiler

    name = f"log_persistent_cache_{kind}"
    original = getattr(compiler, name)

    def wrapped(module_name, cache_key):
        rec = _record()
        rec.setdefault(kind, []).append([str(module_name), str(cache_key)])
        if kind == "miss":
            _profile["pending"] = str(cache_key)
            if "jaxdp_key" in _profile:  # (compiled for jaxdp's own program cache: the same program as its key)
                rec.setdefault("alias", []).append([str(cache_key), _profile["jaxdp_key"]])
        return original(module_name, cache_key)

    setattr(compiler, name, wrapped)


def _record_jaxdp_programs():
    """Records, per test, the key of every program it asks jaxdp's own program cache for
    (``jaxdp/numerics/_program_cache.py``), and which XLA program each key compiled: a program that cache gives a
    test from memory or from its files (compiled by an earlier test, or by the other worker) reaches neither of
    JAX's cache logs, and the test shares it all the same."""
    cache = program_cache
    key_of, load = cache._key, cache._load_or_compile

    def key(*args, **kwargs):
        out = key_of(*args, **kwargs)
        _record().setdefault("jaxdp", []).append(out)
        return out

    def load_or_compile(key, *args, **kwargs):
        _profile["jaxdp_key"] = key
        try:
            return load(key, *args, **kwargs)
        finally:
            _profile.pop("jaxdp_key", None)

    cache._key, cache._load_or_compile = key, load_or_compile


if _PROFILE_DIR:
    jax.monitoring.register_event_duration_secs_listener(_on_jax_duration)
    try:  # (JAX- and jaxdp-internal names: a profile without keys is still a profile)
        _record_cache_key("miss")
        _record_cache_key("hit")
        _record_jaxdp_programs()
    except (ImportError, AttributeError):
        pass

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        import time

        _profile["test"] = item.nodeid
        start = time.perf_counter()
        yield
        rec = _record(item.nodeid)
        rec["wall"] = time.perf_counter() - start  # setup + call + teardown: every test, not only the log's slowest
        _profile["test"] = "<between tests>"

    def pytest_sessionfinish(session, exitstatus):
        import json

        os.makedirs(_PROFILE_DIR, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(_PROFILE_DIR, f"profile-{worker}.json"), "w") as f:
            json.dump(_profile["tests"], f)
        with open(os.path.join(_PROFILE_DIR, f"clears-{worker}.json"), "w") as f:
            json.dump(_profile["clears"], f)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks :data:`SLOW_TESTS` and the conformance checks a class lists in ``slow_checks`` as slow (run with
    ``-m slow``).  An entry of :data:`SLOW_TESTS` that names no test of a collected file is an error (a renamed
    test or parameter would otherwise slip back into the default run unseen)."""
    ids = {item.nodeid for item in items}
    # (whole files only: a command line naming single tests collects only those)
    partial = any("::" in str(arg) for arg in config.invocation_params.args)
    files = set() if partial else {nodeid.split("::")[0] for nodeid in ids}
    stale = sorted(n for n in SLOW_TESTS if n.split("::")[0] in files and n not in ids)
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SLOW_TESTS names tests that do not exist: {stale}")
    for item in items:
        if item.nodeid in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
            continue
        cls = getattr(item, "cls", None)  # doctest items have none
        slow = getattr(cls, "slow_checks", ()) if cls is not None else ()
        if getattr(item, "originalname", item.name) in slow:
            item.add_marker(pytest.mark.slow)


#: resident memory (bytes) above which JAX's in-memory caches are dropped after a test module
RELEASE_ABOVE = int(float(os.environ.get("JAXDP_TEST_RELEASE_GB", "8")) * 2**30)
#: memory mappings above which they are dropped too: each compiled CPU program maps its code, and a process at
#: Linux's ``vm.max_map_count`` (65,530 by default) dies in the next compile with a segmentation fault
RELEASE_ABOVE_MAPS = int(os.environ.get("JAXDP_TEST_RELEASE_MAPS", "24000"))


def _resident_bytes():
    """This process's resident memory (Linux ``/proc``; elsewhere ``None``)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _mappings():
    """This process's number of memory mappings (Linux ``/proc``; elsewhere ``None``)."""
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs(request):
    """Drops JAX's compiled programs after a test module once the process holds more than ``RELEASE_ABOVE`` bytes
    or ``RELEASE_ABOVE_MAPS`` memory mappings.

    Kept for the whole run, the compiled programs' code mappings reach the kernel's limit and the next compile
    segfaults.  Dropping them costs the next module a new trace and lowering of every program it shares (the
    persistent cache saves only the XLA compile), so they go only when the mappings or memory ask for it; resident
    memory alone is a poor signal, as it never falls once reached.
    """
    yield
    rss, maps = _resident_bytes(), _mappings()
    release = rss is None or rss > RELEASE_ABOVE or maps is None or maps > RELEASE_ABOVE_MAPS
    if release:
        jax.clear_caches()
        program_cache.forget_loaded()
    # (module, resident GB, mappings, dropped) after each module
    _profile["clears"].append([request.node.nodeid, None if rss is None else round(rss / 2**30, 2), maps, release])
