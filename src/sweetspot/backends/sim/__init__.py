"""The embedded simulator: vLLM's scheduler on a simulated clock with a GPU cost model."""

from sweetspot.backends.sim.cost import LinearStepModel, RooflineModel, StepShape
from sweetspot.backends.sim.simulator import SimFacts, SimRun, SimSetup, simulate

__all__ = ["LinearStepModel", "RooflineModel", "SimFacts", "SimRun", "SimSetup", "StepShape",
           "simulate"]
