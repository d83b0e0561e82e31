import pytest

from leasehold.fake import FakeHost


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()
