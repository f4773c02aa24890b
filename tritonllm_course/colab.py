"""The first code cell of every notebook, and the one constant that names the course's repository.

`REPO_URL` is the git address Colab clones the course from. It is kept here, once: set it when the
repository is published, then run `tritonllm-course sync-notebooks` to write it into every notebook's
first cell (a test checks that the cells agree with `SETUP_CELL`).
"""
import re

REPO_URL = ""  # the course's git address (https://...); empty until the repository is published

# A repository's address on GitHub and nothing more: an owner (letters, digits and single inner hyphens, at most 39)
# and a repository name (letters, digits, '.', '-', '_'; at most 100; not '.', '..' or a name ending in .git), then
# at most ".git" and a slash. A space, a query, a fragment or a deeper path (/tree/dev) would break every link.
_GITHUB_REPO = re.compile(r"https://github\.com/(?P<owner>[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38})"
                          r"/(?P<repo>[A-Za-z0-9._-]{1,100}?)(?:\.git)?/?")


def github_repo(url, name: str = "REPO_URL", hint: str = "") -> str:
    """The "OWNER/REPO" of a GitHub repository's address (https://github.com/OWNER/REPO, with or without .git or a
    trailing slash), or a ValueError naming `name`, the setting or option it came from, and ending in `hint`."""
    found = _GITHUB_REPO.fullmatch(url) if isinstance(url, str) else None
    if found is None or len(found["owner"]) > 39 or found["repo"] in (".", "..") or found["repo"].endswith(".git"):
        raise ValueError(f"{name} must be a GitHub address (https://github.com/OWNER/REPO) for Colab links; "
                         f"it is {url!r}{hint}")
    return f"{found['owner']}/{found['repo']}"


def colab_url(notebook: str, repo_url: str | None = None, branch: str = "main") -> str:
    """The "Open in Colab" address of a chapter, for a repository on GitHub (`repo_url`, default `REPO_URL`).

    colab_url("01_triton_basics.ipynb", "https://github.com/OWNER/REPO") ->
    https://colab.research.google.com/github/OWNER/REPO/blob/main/notebooks/01_triton_basics.ipynb
    """
    if repo_url is None:
        repo = github_repo(REPO_URL, hint=" (set it in tritonllm_course/colab.py)")
    else:
        repo = github_repo(repo_url, hint=" (the repo_url given)")
    return f"https://colab.research.google.com/github/{repo}/blob/{branch}/notebooks/{notebook}"


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
