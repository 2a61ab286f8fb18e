"""How "auto" picks a ZooKeeper provider: Docker only when an image is already here, never after a pull
(a first `./lab demo` runs the Debian jars instead of waiting on a registry); Docker asked for by name
still pulls the official image. A stand-in Docker engine records what it was asked."""

from __future__ import annotations

import docker.errors
import pytest

import zkensemble
from zkensemble import ImageMissing, Provider, docker_provider, local_provider


class Images:
    def __init__(self, present: set[str], pullable: set[str]) -> None:
        self.present, self.pullable, self.pulls = set(present), pullable, []

    def get(self, tag: str):
        if tag not in self.present:
            raise docker.errors.ImageNotFound(tag)
        return tag

    def pull(self, tag: str):
        self.pulls.append(tag)
        if tag not in self.pullable:
            raise docker.errors.APIError(f"cannot pull {tag}")
        self.present.add(tag)
        return tag


class Engine:
    def __init__(self, present: set[str] = frozenset(), pullable: set[str] = frozenset()) -> None:
        self.images = Images(present, pullable)


@pytest.fixture
def engine(monkeypatch):
    """`engine(present=..., pullable=...)`: the Docker engine the provider talks to from now on."""
    monkeypatch.delenv("LAB_ZK_IMAGE", raising=False)
    monkeypatch.delenv("LAB_ZK_PROVIDER", raising=False)

    def install(**images) -> Engine:
        fake = Engine(**images)
        monkeypatch.setattr(docker_provider, "docker_client", lambda timeout_s=30: fake)
        return fake

    return install


def test_auto_picks_local_without_pulling_when_docker_has_no_image(engine, monkeypatch):
    fake = engine(pullable={docker_provider.OFFICIAL_IMAGE})
    monkeypatch.setattr(local_provider, "available", lambda: True)

    assert zkensemble.choose_provider("auto") is Provider.LOCAL
    assert fake.images.pulls == []


def test_auto_picks_docker_when_an_image_is_here(engine):
    engine(present={docker_provider.LOCAL_IMAGE})

    assert zkensemble.choose_provider("auto") is Provider.DOCKER


def test_a_named_image_counts_only_when_present(engine, monkeypatch):
    fake = engine(present={docker_provider.OFFICIAL_IMAGE}, pullable={"zookeeper:3.9"})
    monkeypatch.setenv("LAB_ZK_IMAGE", "zookeeper:3.9")

    assert not docker_provider.available()
    assert fake.images.pulls == []


def test_docker_by_name_still_pulls_the_official_image(engine):
    fake = engine(pullable={docker_provider.OFFICIAL_IMAGE})

    assert docker_provider.resolve_image(fake) == docker_provider.OFFICIAL_IMAGE
    assert fake.images.pulls == [docker_provider.OFFICIAL_IMAGE]


def test_docker_by_name_without_any_image_says_how_to_build_one(engine):
    fake = engine()

    with pytest.raises(ImageMissing, match="build.sh"):
        docker_provider.resolve_image(fake)
