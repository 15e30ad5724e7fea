"""The plugin conformance kit, where a plugin's test suite imports it from
(``from infbench.testing.conformance import assert_conforms``): see
:mod:`infbench.contract.conformance`, which holds it in the contract layer so that
``infbench plugins check`` runs the same checks."""

from infbench.contract.conformance import Finding, NonConformingPlugin, assert_conforms, check_conformance

__all__ = ["Finding", "NonConformingPlugin", "assert_conforms", "check_conformance"]
