"""The ground floor: the types that flow, errors, the spec and its choice points, formulas, rounding,
tolerances, YAML, result rows and known findings. Imports nothing from the project above it."""
