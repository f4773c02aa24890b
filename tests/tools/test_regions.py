"""Solution regions with hint blocks: a hint continued on the lines right after its BEGIN line (`#` and at
least three spaces, at the marker's indentation) reaches the exercise whole, and the learner's code below
it is carried over like any other region body."""
from helpers import filled
from tritonllm_course import exercise_files, regions

SOLUTION = '''import triton


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # BEGIN SOLUTION: this program's block of offsets, masked to n;
    #   load x and y, add them,
    #   store the sum
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + tl.load(y_ptr + offs, mask=offs < n),
             mask=offs < n)
    # END SOLUTION


def add(x, y, out):
    add_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)
'''
HINT = "this program's block of offsets, masked to n; load x and y, add them, store the sum"
STUB = '    raise NotImplementedError("exercise add.py, add_kernel: not implemented yet")'


def test_a_hint_block_is_one_hint_and_not_code():
    [r] = regions.regions(SOLUTION)
    assert r.hint == HINT and r.more == 2
    assert r.hint_block == ["    #   load x and y, add them,", "    #   store the sum"]
    assert r.code[0].lstrip().startswith("offs =") and r.body == r.hint_block + r.code


def test_the_exercise_shows_the_whole_hint_above_its_stub():
    ex = regions.make_exercise(SOLUTION, "add")
    assert ("    # BEGIN EXERCISE: this program's block of offsets, masked to n;\n"
            "    #   load x and y, add them,\n"
            "    #   store the sum\n"
            f"{STUB}\n"
            "    # END EXERCISE\n") in ex
    [r] = regions.regions(ex)
    assert r.hint == HINT and r.code == [STUB] and r.unfilled
    assert exercise_files.is_stub(ex)
    assert regions.mask(ex) == regions.mask(SOLUTION)
    assert f"# BEGIN REGION: {HINT}\n" in regions.mask(SOLUTION)


def test_what_ends_a_hint_block():
    def more(after: str, begin: str = "    # BEGIN SOLUTION: the hint") -> int:
        return regions.regions(f"def f():\n{begin}\n{after}\n    pass\n    # END SOLUTION\n")[0].more
    assert more("    #   continued") == 1
    assert more("    #      continued, indented further") == 1
    assert more("    # a comment of the code") == 0          # `#` and one space: the code's own comment
    assert more("    #  two spaces") == 0
    assert more("\n    #   after a blank line") == 0
    assert more("    #   ") == 0                            # no text
    assert more("        #   indented deeper than the marker") == 0
    assert more("    #   continued", begin="    # BEGIN SOLUTION") == 0        # no hint to continue
    assert more("    #   continued", begin="    # BEGIN SOLUTION:") == 0


def test_a_changed_line_of_the_block_is_a_changed_hint():
    other = SOLUTION.replace("#   store the sum", "#   store the difference")
    assert regions.mask(other) != regions.mask(SOLUTION)
    mine = filled(regions.make_exercise(SOLUTION, "add"), SOLUTION)
    assert "another hint" in exercise_files._mismatch(mine, regions.make_exercise(other, "add"))


def test_a_hint_compares_by_its_words_so_rewrapping_it_is_no_drift():
    block = ";\n    #   load x and y, add them,\n    #   store the sum"
    one_line = SOLUTION.replace(block, "; load x and y, add them, store the sum")
    assert regions.regions(one_line)[0].more == 0
    assert regions.mask(one_line) == regions.mask(SOLUTION)


def test_a_filled_region_below_a_hint_block_is_carried_over():
    mine = filled(regions.make_exercise(SOLUTION, "add"), SOLUTION)
    assert regions.regions(mine)[0].code == regions.regions(SOLUTION)[0].code
    assert regions.mask(mine) == regions.mask(SOLUTION) and not exercise_files.is_stub(mine)
    changed = '"""Adds."""\n' + SOLUTION
    merged = exercise_files.carry_over(mine, regions.make_exercise(changed, "add"))
    assert merged == '"""Adds."""\n' + mine
    [r] = regions.regions(merged)
    assert r.hint == HINT and r.code == regions.regions(SOLUTION)[0].code


def test_a_stub_region_below_a_hint_block_gets_the_fresh_stub():
    ex = regions.make_exercise(SOLUTION, "add")
    fresh = regions.make_exercise(SOLUTION.replace("def add(x, y, out):", "def add(x, y, out):  # one program"), "add")
    assert exercise_files.carry_over(ex, fresh) == fresh
