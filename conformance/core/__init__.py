"""The ground floor: the types that flow, errors, the spec and its choice points, formulas, rounding,
tolerances, YAML and result rows. Imports nothing from the project above it."""
