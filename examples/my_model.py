"""A complete user model: `torchgauge run --model-file examples/my_model.py my_mlp`."""

from torch import nn

from torchgauge import Workload, register_model


@register_model(domain="other", task="regression", source="my team", batch_size=(256, 1024))
def my_mlp(ctx, hidden: int = 512) -> Workload:
    """A 3-layer MLP regressor on 64 features."""
    net = nn.Sequential(nn.Linear(64, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))
    x = ctx.randn(ctx.batch_size, 64)  # synthetic, seeded, already on ctx.device
    y = ctx.randn(ctx.batch_size, 1)
    opt = ctx.optimizer(net.parameters(), "adam", lr=1e-3) if ctx.train else None
    return Workload(ctx, net, (x,), y, loss_fn=nn.functional.mse_loss, optimizer=opt)
