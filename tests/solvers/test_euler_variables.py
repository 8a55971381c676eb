"""The Euler solver's primitive ↔ conserved map (``ssmpde.solvers.euler.variables``): a true
inverse pair, the same bits on NumPy, torch and the compiled kernels, and the only copy."""

import ast
import inspect

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.solvers import euler
from ssmpde.solvers.euler import Euler2D, conserved_totals, kernels, variables
from ssmpde.solvers.euler.variables import conserved_variables, primitive_variables

positive = st.floats(1e-3, 1e3)
velocity = st.floats(-1e2, 1e2)


@given(rho=positive, u=velocity, v=velocity, p=positive, c=st.floats(0, 1),
       gamma=st.floats(1.05, 3.0))
def test_primitive_inverts_conserved(rho, u, v, p, c, gamma):
    back = primitive_variables(*conserved_variables(rho, u, v, p, c, gamma), gamma)
    energy = p / (gamma - 1) + 0.5 * rho * (u * u + v * v)
    # p is the difference of E and the kinetic energy: its error is round-off of E
    np.testing.assert_allclose(back, (rho, u, v, p, c), rtol=1e-12,
                               atol=1e-14 * energy * (gamma - 1))


def test_closed_form():
    rho, u, v, p, c, gamma = 2.0, 3.0, -1.0, 0.8, 0.25, 1.4
    assert conserved_variables(rho, u, v, p, c, gamma) == (2.0, 6.0, -2.0, 2.0 + 10.0, 0.5)


def test_arrays_tensors_and_kernels_give_the_same_bits():
    rng = np.random.default_rng(0)
    w = [rng.uniform(0.1, 2, 7), rng.normal(size=7), rng.normal(size=7), rng.uniform(0.1, 2, 7),
         rng.uniform(0, 1, 7)]
    on_arrays = conserved_variables(*w, 1.4)
    on_tensors = conserved_variables(*(torch.as_tensor(x) for x in w), 1.4)
    for a, t in zip(on_arrays, on_tensors):
        np.testing.assert_array_equal(a, t.numpy())
    for i in range(7):
        compiled = kernels._conserved(*(x[i] for x in w), 1.4)
        assert compiled == tuple(a[i] for a in on_arrays)
        back = kernels._primitive(*compiled, 1.4)
        assert back == tuple(a[i] for a in primitive_variables(*on_arrays, 1.4))


def test_the_solver_totals_and_checks_convert_alike():
    solver = Euler2D(resolution=8, simulation_resolution=8, problem="kelvin-helmholtz",
                     final_time=0.1, record_interval=0.1)
    frame = solver.sample_inputs(0, [0, 1])["initial"]
    form = solver.conservative_form()
    conserved = form.to_conserved(frame)
    np.testing.assert_array_equal(conserved.sum(axis=(2, 3)),
                                  conserved_totals(frame, solver.config.gamma))
    np.testing.assert_array_equal(form.to_primitive(conserved),
                                  np.stack(primitive_variables(*np.moveaxis(conserved, 1, 0),
                                                               solver.config.gamma), axis=1))
    fields = dict(zip(solver.fields, np.moveaxis(frame, 1, 0)))
    for k, name in ((1, "x momentum"), (2, "y momentum"), (3, "energy")):
        np.testing.assert_array_equal(solver.checks.totals[name](fields), conserved[:, k])


def _kinetic_energies(tree):
    """Lines of ``a*a + b*b`` or ``a**2 + b**2``: the kinetic energy, a copy of the map."""
    def square(node):
        return (isinstance(node, ast.BinOp) and (
            isinstance(node.op, ast.Mult) and ast.dump(node.left) == ast.dump(node.right)
            or isinstance(node.op, ast.Pow) and getattr(node.right, "value", None) == 2))

    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add) and square(node.left) and square(node.right)]


def test_no_euler_module_keeps_a_copy():
    for module in (euler.engine, euler.kernels, euler.reference, euler.solver, euler.initial):
        tree = ast.parse(inspect.getsource(module))
        assert not _kinetic_energies(tree), module.__name__
    assert _kinetic_energies(ast.parse(inspect.getsource(variables)))  # the check can fail
    for module in (euler.engine, euler.reference, euler.solver):
        source = inspect.getsource(module)
        assert "conserved_variables" in source or "primitive_variables" in source, module
    assert kernels._conserved.py_func is conserved_variables
    assert kernels._primitive.py_func is primitive_variables
