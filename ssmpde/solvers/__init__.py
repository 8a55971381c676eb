"""Classical PDE solvers that generate datasets and act as time-steppers."""
