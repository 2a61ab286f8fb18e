"""The ways starting or driving a ZooKeeper ensemble can fail, each with a message a user can act on."""

from __future__ import annotations


class ZkEnsembleError(Exception):
    """Base class: the message is one line saying what is wrong and what to do."""


class UnknownProvider(ZkEnsembleError):
    pass


class ProviderUnavailable(ZkEnsembleError):
    """Neither Docker nor Java/ZooKeeper (or not the one asked for) can run an ensemble here."""


class ImageMissing(ZkEnsembleError):
    pass


class PortInUse(ZkEnsembleError):
    pass


class NotReady(ZkEnsembleError):
    """A node did not start serving within its deadline."""


class AlreadyUp(ZkEnsembleError):
    pass


class NotUp(ZkEnsembleError):
    pass


class NotSupported(ZkEnsembleError):
    pass
