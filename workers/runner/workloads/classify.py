"""Classification on small built-in tables (scikit-learn's bundled sets) or generated data.

No downloads: digits, iris, wine and breast_cancer ship inside scikit-learn; ``synthetic``
is generated from ``train.seed``. Features are standardised with the training split's
statistics. ``cnn`` reads digits as 1x8x8 images.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workers.runner.workloads.base import Workload

#: logits held for the window's training accuracy before they are scored (4 MiB in float32); a long window of
#: large batches is scored in parts of this size
HOLD_MAX = 1 << 20

_LOADERS = {"digits": "load_digits", "iris": "load_iris", "wine": "load_wine",
            "breast_cancer": "load_breast_cancer"}


def load_arrays(dataset: str, samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features (float32) and integer labels of a built-in dataset."""
    if dataset == "synthetic":
        from sklearn.datasets import make_classification

        x, y = make_classification(n_samples=samples, n_features=20, n_informative=10, n_classes=4,
                                   n_clusters_per_class=1, random_state=seed)
    else:
        import sklearn.datasets

        x, y = getattr(sklearn.datasets, _LOADERS[dataset])(return_X_y=True)
    return x.astype(np.float32), y.astype(np.int64)


class ClassifyWorkload(Workload):
    unit = "samples"

    def __init__(self, spec, run_dir):
        super().__init__(spec, run_dir)
        self.output_dim: int | None = None
        self.input_dim: int | None = None
        # this log window's training batches, (logits, labels), scored when the window is logged
        self._held: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._held_numel = 0
        self._correct: torch.Tensor | None = None
        self._seen = 0

    def datasets(self):
        data, seed = self.spec.data, self.spec.train.seed
        x, y = load_arrays(data.dataset, data.samples, seed)
        order = np.random.default_rng(seed).permutation(len(x))
        n_val = max(1, int(round(len(x) * data.val_fraction))) if data.val_fraction > 0 else 0
        val_idx, train_idx = order[:n_val], order[n_val:]
        mean, std = x[train_idx].mean(0), x[train_idx].std(0) + 1e-6
        x = (x - mean) / std
        self.input_dim, self.output_dim = x.shape[1], int(y.max()) + 1
        as_set = lambda idx: TensorDataset(torch.from_numpy(x[idx]), torch.from_numpy(y[idx]))  # noqa: E731
        return as_set(train_idx), as_set(val_idx)

    def model(self) -> nn.Module:
        if self.input_dim is None:
            self.datasets()
        cfg = self.spec.model
        if cfg.name == "logreg":
            return nn.Linear(self.input_dim, self.output_dim)
        if cfg.name == "cnn":
            return DigitsCNN(cfg.hidden, self.output_dim)
        layers: list[nn.Module] = []
        width = self.input_dim
        for _ in range(cfg.layers):
            layers += [nn.Linear(width, cfg.hidden), nn.ReLU()]
            width = cfg.hidden
        return nn.Sequential(*layers, nn.Linear(width, self.output_dim))

    def loss(self, model, batch):
        x, y = batch
        logits = model(x)
        # The training accuracy is scored per log window, not per batch (issue #12): a batch costs a detach
        # and an append here; argmax, compare and sum run once over the window's batches in _score, so a
        # step dispatches (on a GPU: launches) four fewer operations and the device is not synchronised.
        self._held.append((logits.detach(), y))
        self._held_numel += logits.numel()
        if self._held_numel >= HOLD_MAX:
            self._score()
        return F.cross_entropy(logits if logits.dtype == torch.float32 else logits.float(), y), len(y)

    def _score(self) -> None:
        """Fold the held batches into the window's correct and seen counts (still a tensor: no sync)."""
        if not self._held:
            return
        logits = torch.cat([held[0] for held in self._held])
        labels = torch.cat([held[1] for held in self._held])
        correct = (logits.argmax(-1) == labels).sum()
        self._correct = correct if self._correct is None else self._correct + correct
        self._seen += len(labels)
        self._held, self._held_numel = [], 0

    def train_metrics(self) -> dict[str, float]:
        self._score()
        out = {"train_acc": float(self._correct) / self._seen} if self._seen else {}
        self._correct, self._seen = None, 0
        return out

    @torch.no_grad()
    def evaluate(self, model, batches) -> dict[str, float]:
        total_loss, correct, seen = 0.0, 0, 0
        for x, y in batches:
            logits = model(x).float()
            total_loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            seen += len(y)
        return {"val_loss": total_loss / seen, "val_acc": correct / seen} if seen else {}

    def finish(self, model, is_main):
        if not is_main:
            return []
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch.save(state, self.run_dir / "model.pt")
        return [{"name": "model", "path": "model.pt"}]


class DigitsCNN(nn.Module):
    """Two conv layers over the 8x8 digit image, then a small head."""

    def __init__(self, hidden: int, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        x = x.view(-1, 1, 8, 8)
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x)
