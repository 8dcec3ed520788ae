import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine OpenMP threads that wait
    for each other make these many small ops 10-50x slower; runs after conftest's thread setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
