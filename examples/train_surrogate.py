"""Train GeoMaNO on a Darcy dataset, evaluate it, and load the checkpoint back.

Same as the command line:

    ssmpde train geomano --data darcy.nc --preset darcy --epochs 30 --num-test 8 --out runs/darcy
    ssmpde evaluate runs/darcy --data darcy.nc --out predictions.nc

Run: python examples/train_surrogate.py --out examples_output [--tiny]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, evaluate, load_checkpoint, train


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples_output"))
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "darcy_train.nc"
    generate("darcy", num_samples=12 if args.tiny else 72, seed=0, out=data,
             resolution=9 if args.tiny else 29, simulation_resolution=17 if args.tiny else 57,
             overwrite=True, progress=not args.tiny)
    run = args.out / "runs" / "darcy-geomano"
    shutil.rmtree(run, ignore_errors=True)
    # The paper's Darcy configuration, made smaller so that it trains in a CPU minute.
    metrics = train("geomano", data, out=run, preset="darcy",
                    model_overrides=dict(width=8 if args.tiny else 32,
                                         depth=1 if args.tiny else 4),
                    config=TrainConfig(epochs=2 if args.tiny else 40, batch_size=4, lr=2e-3,
                                       num_test=4 if args.tiny else 8),
                    progress=not args.tiny)
    print(f"after {metrics['epoch']} epochs: test relative L2 {metrics['test_rel_l2']:.4f}")
    # The run directory is the checkpoint: config.json + weights.safetensors, no pickles.
    model, record = load_checkpoint(run)
    print(f"{record['model']} with {sum(p.numel() for p in model.parameters()):,} parameters")
    result = evaluate(run, data, out=args.out / "darcy_predictions.nc", overwrite=True)
    print(f"relative L2 over all {len(result['rel_l2_per_sample'])} samples: "
          f"{result['rel_l2']:.4f}")
    return {"run": run, "metrics": metrics, "evaluation": result}


if __name__ == "__main__":
    main()
