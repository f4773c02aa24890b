"""The first code cell of every notebook, and the one constant that names the course's repository.

`REPO_URL` is the git address Colab clones the course from. It is kept here, once: set it when the
repository is published, then run `tritonllm-course sync-notebooks` to write it into every notebook's
first cell (a test checks that the cells agree with `SETUP_CELL`).
"""
REPO_URL = ""  # the course's git address (https://...); empty until the repository is published


def colab_url(notebook: str, repo_url: str | None = None, branch: str = "main") -> str:
    """The "Open in Colab" address of a chapter, for a repository on GitHub.

    colab_url("01_triton_basics.ipynb", "https://github.com/OWNER/REPO") ->
    https://colab.research.google.com/github/OWNER/REPO/blob/main/notebooks/01_triton_basics.ipynb
    """
    repo_url = (repo_url if repo_url is not None else REPO_URL).removesuffix(".git").rstrip("/")
    prefix = "https://github.com/"
    if not repo_url.startswith(prefix):
        raise ValueError(f"REPO_URL must be a GitHub address ({prefix}OWNER/REPO) for Colab links; "
                         f"it is {repo_url!r} (set it in tritonllm_course/colab.py)")
    return f"https://colab.research.google.com/github/{repo_url[len(prefix):]}/blob/{branch}/notebooks/{notebook}"


COLAB_ROOT = "/content/tritonllm-course"   # where the first cell clones the course in Colab

SETUP_CELL = f'''# Set-up: run this cell first. In Colab it clones and installs the course (never reinstalling torch).
import importlib.util, os, subprocess, sys
REPO_URL = "{REPO_URL}"  # kept in tritonllm_course/colab.py
if "google.colab" in sys.modules:
    root = "{COLAB_ROOT}"
    if importlib.util.find_spec("tritonllm_course") is None:
        if not REPO_URL:
            raise RuntimeError("set REPO_URL above to the course's git address")
        if not os.path.isdir(root):
            subprocess.run(["git", "clone", "--depth", "1", REPO_URL, root], check=True)
        subprocess.run([sys.executable, os.path.join(root, "scripts", "install.py"), "--colab"], check=True)
    if root not in sys.path:
        sys.path.insert(0, root)
    os.chdir(os.path.join(root, "notebooks"))   # on every run: a runtime restart keeps the install, not the folder
elif importlib.util.find_spec("tritonllm_course") is None:
    raise RuntimeError("tritonllm_course is not installed: start the course with `make lab`")
import tritonllm_course
rt = tritonllm_course.setup()'''
