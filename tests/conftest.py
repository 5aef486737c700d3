"""The tests make exactness claims, so they run in float64; absorbjax itself never enables it."""

import jax

jax.config.update("jax_enable_x64", True)
