"""The course's experiments on the GPU: one probe a file, each with its question, method, result and
verdict in its docstring, and an index in lab/README.md. Run one from the repository root:

    python -m lab.<probe> [OUTDIR]        (on a GPU; OUTDIR defaults to lab/results/)

What the probes share is in `lab.common`.
"""
