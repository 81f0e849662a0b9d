"""The Problem contract as a protocol: as_problem, plain objects from files and the command line, old imports."""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from polydg.assembly import assemble
from polydg.backend import array_namespace
from polydg.errors import ProblemError
from polydg.mesh import from_spec
from polydg.partition import agglomerate
from polydg.problem import COEFFICIENTS, Problem, as_problem, load_problem
from polydg.space import DGSpace

SPACE = DGSpace(agglomerate(from_spec("square:8"), 6), 1)

#: every attribute that makes an object a problem, as the messages list them
ATTRIBUTES = ", ".join(COEFFICIENTS + ("initial",))


def _same_system(first, second):
    """Both assembled systems, bit for bit: the CSR arrays and the load."""
    a, b = assemble(SPACE, first), assemble(SPACE, second)
    for name in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(a.matrix, name), getattr(b.matrix, name)), name
    assert np.array_equal(a.rhs, b.rhs)
    return a


# the same problem twice: a Problem, and a plain class that knows nothing of polydg


def _exact(x):
    return np.exp(x[:, 0]) * np.sin(np.pi * x[:, 1])


REFERENCE = Problem(
    name="convection",
    diffusion=lambda x: 0.01 * (1 + x[:, 0]),
    advection=np.array([1.0, 0.5]),
    reaction=1.0,
    source=lambda x: np.cos(x[:, 0]) + x[:, 1] ** 2,
    dirichlet=_exact,
    neumann=lambda x, normal: x[:, 1] * normal[:, 0],
    is_neumann=lambda x, normal: normal[:, 0] > 0.5,
    exact=_exact,
    dim=2,
)


class Convection:
    name = "convection"
    dim = 2
    advection = np.array([1.0, 0.5])  # constants as attributes, methods for the rest
    reaction = 1.0

    def diffusion(self, x):
        return 0.01 * (1 + x[:, 0])

    def source(self, x):
        return np.cos(x[:, 0]) + x[:, 1] ** 2

    def dirichlet(self, x):
        return _exact(x)

    def neumann(self, x, normal):
        return x[:, 1] * normal[:, 0]

    def is_neumann(self, x, normal):
        return normal[:, 0] > 0.5

    def exact(self, x):
        return _exact(x)


@pytest.mark.parametrize("plain", [Convection(), Convection], ids=["instance", "class"])
def test_a_plain_object_assembles_bit_for_bit_like_the_problem(plain):
    problem = as_problem(plain, 2)
    assert isinstance(problem, Problem) and problem.name == "convection" and problem.dim == 2
    # constants stay constants: never expanded to the points
    assert problem.is_constant("advection") and problem.is_constant("reaction")
    assert not problem.is_constant("diffusion") and problem.has_neumann and problem.has_exact
    result = _same_system(REFERENCE, problem)
    assert result.matrix.nnz > 0 and np.abs(result.rhs).max() > 0
    _same_system(REFERENCE, plain)  # assemble() adapts the plain object itself


def test_missing_attributes_mean_zero():
    class Minimal:
        diffusion = 1.0

        def source(self, x):
            return 1.0 + x[:, 0]

    problem = as_problem(Minimal())
    assert problem.name == "Minimal" and problem.dim is None
    for name in ("advection", "reaction", "dirichlet", "neumann", "is_neumann", "exact", "exact_gradient", "initial"):
        assert getattr(problem, name) is None, name
    assert not problem.has_advection and not problem.has_reaction and not problem.has_neumann
    assert not problem.has_exact and problem.space_time is False
    x = np.random.default_rng(1).random((7, 2))
    assert problem.reaction_at(x).tolist() == [0.0] and problem.dirichlet_at(x).tolist() == [0.0]
    assert problem.advection_at(x).shape == (1, 2) and not problem.advection_at(x).any()
    _same_system(Problem("Minimal", diffusion=1.0, source=lambda x: 1.0 + x[:, 0]), problem)


def test_constants_are_taken_as_the_problem_takes_them():
    class Constants:
        diffusion = [[2.0, 0.5], [0.5, 1.0]]  # a list: read as an array, like Problem(diffusion=[[...]])
        advection = (1.0, -1.0)
        reaction = 3
        source = np.float32(2.5)
        dirichlet = 1.0
        neumann = 0.0
        is_neumann = False

    problem = as_problem(Constants, 2)
    same = Problem("Constants", diffusion=[[2.0, 0.5], [0.5, 1.0]], advection=(1.0, -1.0), reaction=3,
                   source=np.float32(2.5), dirichlet=1.0, neumann=0.0, is_neumann=False)
    x = np.random.default_rng(2).random((5, 2))
    for name in ("diffusion", "advection", "reaction", "source", "dirichlet"):
        assert problem.is_constant(name)
        got, expected = getattr(problem, f"{name}_at")(x), getattr(same, f"{name}_at")(x)
        assert got.shape == expected.shape and got.shape[0] == 1 and np.array_equal(got, expected), name
    assert problem.neumann_mask(x, x).tolist() == [False]
    _same_system(same, problem)


def test_modules_factories_and_what_is_returned_as_it_is():
    problem = Problem("given")
    assert as_problem(problem) is problem and as_problem(problem, 3) is problem
    heat = types.ModuleType("heat")  # functions at module level meet the contract too
    heat.diffusion = lambda x: np.ones(len(x))
    heat.source = 1.0
    assert as_problem(heat).name == "heat" and not as_problem(heat).is_constant("diffusion")

    class ByDim:
        def __init__(self, dim):
            self.dim = dim
            self.advection = np.ones(dim)

    def make(dim):  # a function returning a plain object
        return ByDim(dim)

    for factory in (ByDim, make):
        made = as_problem(factory, 3)
        assert made.name == "ByDim" and made.dim == 3 and made.advection_at(np.zeros((1, 3))).shape == (1, 3)
    assert as_problem(lambda: Problem("no-args"), 2).name == "no-args"  # called without dim: it takes none

    class Callable:  # callable, but with the contract's attributes: an object, not a factory
        reaction = 2.0

        def __call__(self, *args):
            raise AssertionError("not to be called")

    assert as_problem(Callable()).reaction == 2.0


def test_space_time_and_initial_are_stored():
    class Slab:
        space_time = True
        advection = (0.5, 1.0)  # b = (w, 1): the time axis is the last coordinate

        def initial(self, x):
            return np.sin(np.pi * x[:, 0])

    problem = as_problem(Slab())
    assert problem.space_time is True and problem.initial(np.array([[0.5, 0.0]])).tolist() == [1.0]
    assert Problem("st", space_time=True, initial=0.0).initial == 0.0
    assert Problem("plain").space_time is False and Problem("plain").initial is None
    with pytest.raises(ProblemError, match=r"^problem 'st': space_time must be a bool, got int$"):
        Problem("st", space_time=1)
    for text in ("u0", "1.0"):  # a number written as text is no number either
        with pytest.raises(ProblemError) as e:
            Problem("st", initial=text)
        assert str(e.value) == "problem 'st': initial must be a callable, a number or an array, got str"


class _Bad:
    """A plain class whose attributes the cases below set."""


def _bad(**attributes):
    obj = _Bad()
    obj.__dict__.update(attributes)
    return obj


class _Raises:
    @property
    def diffusion(self):
        raise RuntimeError("not\nhere")


def _junk():
    return "junk"


def _fails(dim):
    raise ValueError(f"no {dim}D problem")


class _BadClass:
    diffusion = "A"


BAD = [
    (42, f"as_problem: the object is a int, expected a polydg.problem.Problem or a callable returning one, "
         f"or an object with some of its attributes ({ATTRIBUTES})"),
    (_bad(diffusion="A"), "as_problem: the object is a _Bad whose diffusion must be a callable, a number or an "
                          "array, got str"),
    (_bad(exact=1.0), "as_problem: the object is a _Bad whose exact must be a callable of x or None, got float"),
    (_bad(is_neumann=1.0), "as_problem: the object is a _Bad whose is_neumann must be a callable, a bool or None, "
                           "got float"),
    (_bad(reaction=[np.nan]), "as_problem: the object is a _Bad whose reaction constant [nan] is not finite"),
    (_bad(source=1.0, dim="two"), "as_problem: the object is a _Bad whose dim must be 2, 3, 4 or None, got 'two'"),
    (_bad(source=1.0, dim=True), "as_problem: the object is a _Bad whose dim must be 2, 3, 4 or None, got True"),
    (_bad(source=1.0, name=5), "as_problem: the object is a _Bad whose name must be a str, got int"),
    (_bad(source=1.0, space_time="yes"), "as_problem: the object is a _Bad whose space_time must be a bool, got str"),
    (_Raises(), "as_problem: the object is a _Raises whose diffusion raised RuntimeError when read: not here"),
    (_BadClass, "as_problem: _BadClass() returned a _BadClass whose diffusion must be a callable, a number or an "
                "array, got str"),
    (_junk, f"as_problem: _junk() returned a str, expected a polydg.problem.Problem or an object with some of its "
            f"attributes ({ATTRIBUTES})"),
    (_fails, "as_problem: _fails(2) raised ValueError: no 2D problem"),
]


@pytest.mark.parametrize("obj,message", BAD, ids=[m.split(" whose ")[-1][:30] for _, m in BAD])
def test_bad_objects_are_one_line_errors_naming_type_and_attribute(obj, message):
    with pytest.raises(ProblemError) as e:
        as_problem(obj, 2)
    assert str(e.value) == message


def test_shapes_and_dimension_are_checked_against_dim():
    with pytest.raises(ProblemError, match=r"^problem 'convection' is 2D, the mesh is 3D$"):
        as_problem(Convection(), 3)
    with pytest.raises(ProblemError, match=r"^problem '_Bad': advection constant has shape \(3,\), expected \(2,\)"):
        as_problem(_bad(advection=[1.0, 2.0, 3.0]), 2)


def test_a_space_time_problem_or_a_fine_mesh_handed_to_a_steady_assembly_is_one_line():
    from polydg.errors import OptionError
    from polydg.mesh import build_polytopic_mesh
    from polydg.nonlinear import solve_nonlinear
    from polydg.problem import builtin_problem

    fine = from_spec("square:4")
    with pytest.raises(OptionError, match="DGSpace takes a PolytopicMesh, got SimplexMesh: .*agglomerate"):
        DGSpace(fine, 1)
    space = DGSpace(build_polytopic_mesh(fine), 1)
    for name, run in (("paper-2d1", assemble), ("fisher-kpp", solve_nonlinear)):
        with pytest.raises(ProblemError, match=f"^problem '{name}' is a space-time problem: march it slab by slab"):
            run(space, builtin_problem(name, 2))


# ---------------------------------------------------------------------------
# from a problem file, in Python and on the command line

PLAIN_FILE = """
import numpy as np


class Convection:  # no polydg import: the attributes are the contract
    dim = 2
    reaction = 1.0
    advection = np.array([1.0, 0.5])

    def diffusion(self, x):
        return 0.01 * (1 + x[:, 0])

    def source(self, x):
        return np.ones(len(x))


convection = Convection()


class ByDim:
    diffusion = 1.0

    def __init__(self, dim):
        self.dim = dim


def make(dim):
    print("making", dim)
    return ByDim(dim)


class Typo:
    difusion = 1.0


class BadKind:
    diffusion = "A"
"""


def test_plain_objects_in_a_problem_file(tmp_path, capsys):
    path = tmp_path / "plain.py"
    path.write_text(PLAIN_FILE)
    assert load_problem(f"{path}:Convection", 2).name == "Convection"
    from_instance = load_problem(f"{path}:convection", 2)
    assert from_instance.name == "Convection" and from_instance.is_constant("advection")
    assert load_problem(f"{path}:ByDim", 3).dim == 3
    capsys.readouterr()
    assert load_problem(f"{path}:make", 3).dim == 3
    assert capsys.readouterr().out == "making 3\n"  # held back while it ran, shown when it succeeded
    where = f"problem file {str(path)!r}"
    for name, message in [
        ("Typo", f"{where}: Typo() returned a Typo, expected a polydg.problem.Problem or an object with some of its "
                 f"attributes ({ATTRIBUTES})"),
        ("BadKind", f"{where}: BadKind() returned a BadKind whose diffusion must be a callable, a number or an "
                    "array, got str"),
        ("np", f"{where}: np is a module, expected a polydg.problem.Problem or a callable returning one, or an "
               f"object with some of its attributes ({ATTRIBUTES})"),
    ]:
        with pytest.raises(ProblemError) as e:
            load_problem(f"{path}:{name}", 2)
        assert str(e.value) == message
    with pytest.raises(ProblemError, match=r"^problem 'Convection' is 2D, the mesh is 3D$"):
        load_problem(f"{path}:convection", 3)


def test_a_plain_class_from_the_command_line(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text(PLAIN_FILE)
    summary = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-m", "polydg.assemble", "--mesh", "square:8", "--agglomerate", "6",
                        "--degree", "1", "--problem", f"{path}:Convection", "--json", str(summary), "--quiet"],
                       capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == ("", "")
    assert json.loads(summary.read_text())["problem"] == "Convection"


# ---------------------------------------------------------------------------
# the split into a package keeps every old import

#: the names the single-module polydg/problem.py defined (public), and the private ones tests import
OLD_NAMES = ["ALIASES", "BUILTIN_PROBLEMS", "COEFFICIENTS", "Coefficient", "POLYNOMIAL_KINDS", "Polynomial",
             "Problem", "advection_problem", "builtin_names", "builtin_problem", "change_of_type_problem",
             "load_problem", "multi_indices", "neumann_diffusion_matrix", "neumann_problem", "paper_problem",
             "poisson_problem", "polynomial_problem", "_paper_source", "_sincospi"]
OLD_ALL = ["Problem", "Polynomial", "COEFFICIENTS", "BUILTIN_PROBLEMS", "builtin_names", "builtin_problem",
           "polynomial_problem", "load_problem", "paper_problem", "poisson_problem", "advection_problem",
           "change_of_type_problem", "neumann_problem"]


def test_every_old_import_still_works():
    import polydg.problem

    for name in OLD_NAMES:
        exec(f"from polydg.problem import {name}", {})
    namespace: dict = {}
    exec("from polydg.problem import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(OLD_ALL) | {"as_problem"}
    assert polydg.problem.Problem is polydg.problem.contract.Problem
    assert polydg.problem.load_problem("paper-2d", 2).name == "paper-2d"
    # the compiled kernel keeps its options: cached on disk, explicit signature, no GIL
    kernel = polydg.problem._paper_source
    assert kernel.targetoptions["nogil"] and kernel._cache.__class__.__name__ != "NullCache"
    assert len(kernel.signatures) == 1


def test_an_attribute_spelt_like_a_coefficient_is_named_in_a_warning():
    """A misspelt coefficient ("diffusoin") is not read, so it would be zero without a word: the adapter warns
    with the name it is close to; attributes far from any (helpers, imports) pass quietly."""
    from polydg.errors import ProblemWarning

    class Duck:
        def diffusoin(self, x):
            return 1.0 + x[:, 0]

        def source(self, x):
            return np.ones(len(x))

        def helper(self, x):  # far from every name: no warning
            return x

        def is_dirichlet(self, x, normal):  # a predicate helper, near "dirichlet": no warning either
            return True

        ndim = 2  # near "dim", a setting: no warning (only coefficients, which would be zero unsaid)

    with pytest.warns(ProblemWarning) as caught:
        problem = as_problem(Duck(), 2)
    assert [str(w.message) for w in caught] == [
        "as_problem: the object is a Duck with an attribute 'diffusoin' that is not read (did you mean 'diffusion'?)"]
    assert caught[0].filename == __file__  # placed at the user's call, not inside polydg
    assert not problem.has_diffusion
    with pytest.warns(ProblemWarning, match="problem 'Duck' has no diffusion, advection or reaction"):
        result = assemble(SPACE, problem)  # and its matrix is zero: said too
    assert result.matrix.nnz == 0 or not result.matrix.data.any()


def test_a_problem_read_quietly_when_every_attribute_is_one_it_knows():
    import warnings

    module = types.ModuleType("star_import")  # a problem file that did `from numpy import *` (ndim, extract, ...)
    exec("from numpy import *\ndiffusion = 1.0\ndef source(x):\n    return ones(len(x))\n", module.__dict__)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        as_problem(module, 2)

    class Fine:
        diffusion = 1.0
        name = "fine"

        def source(self, x):  # written for any array library: no HostCoefficientWarning on a GPU either
            return array_namespace(x).ones(len(x))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of any kind
        assemble(SPACE, as_problem(Fine(), 2))
        assemble(SPACE, Problem("load only", source=1.0), matrix=False)  # no matrix asked: nothing to say
