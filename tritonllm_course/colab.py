"""The first code cell of every notebook, and the one constant that names the course's repository.

`REPO_URL` is the git address Colab clones the course from. It is kept here, once: set it when the
repository is published, then run `tritonllm-course sync-notebooks` to write it into every notebook's
first cell (a test checks that the cells agree with `SETUP_CELL`).
"""
REPO_URL = ""  # the course's git address (https://...); empty until the repository is published

SETUP_CELL = f'''# Set-up: run this cell first. In Colab it clones and installs the course (never reinstalling torch).
import importlib.util, os, subprocess, sys
REPO_URL = "{REPO_URL}"  # kept in tritonllm_course/colab.py
if importlib.util.find_spec("tritonllm_course") is None:
    if "google.colab" not in sys.modules:
        raise RuntimeError("tritonllm_course is not installed: start the course with `make lab`")
    if not REPO_URL:
        raise RuntimeError("set REPO_URL above to the course's git address")
    root = "/content/tritonllm-course"
    if not os.path.isdir(root):
        subprocess.run(["git", "clone", "--depth", "1", REPO_URL, root], check=True)
    subprocess.run([sys.executable, os.path.join(root, "scripts", "install.py"), "--colab"], check=True)
    sys.path.insert(0, root)
    os.chdir(os.path.join(root, "notebooks"))
import tritonllm_course
rt = tritonllm_course.setup()'''
