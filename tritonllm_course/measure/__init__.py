"""Measuring the kernels: how fast, against what, and where a decode step spends its time.

- `benchmark`: `bench` (a kernel against PyTorch eager, torch.compile and the bandwidth ceiling), the
  CUDA-graph timer `time_calls`, the measured copy ceiling (and the one on record, `recorded_ceiling`),
  and what every GPU script shares;
- `kernel_table`: every ready kernel at its real shapes, one table;
- `engine_bench`: the engine against transformers and the reference model, one table
  (`tritonllm-course bench`); `family`: that table for every size of the family;
- `bytes_model`: the bytes one decode token must move, from the config (chapter 20_profile);
- `trace`: the calls of an engine's step traced on the host, the kernels of a device trace, and which
  call launched each;
- `profiling`: where the engine's step spends its time, per kernel and per slot (chapter 20_profile);
  `layer_times`: the same per layer and per kind of layer;
- `delta_rule_bench` (chapters 15_delta_rule and 16_delta_rule_chunked), `flash_bench`
  (23_flash_attention and 25_flash_decoding), `splitk_bench` (24_split_k), `autotune_bench` (26_autotune),
  `compiler_bench` (28_compilers), `weights_bench` (31_weight_quant): each chapter's GPU measurements beyond
  the kernel table; `quant_accuracy` (31_weight_quant): what 8-bit weights cost in accuracy, on the CPU.

Each script runs as `python -m tritonllm_course.measure.<name> --out results/`.
"""
