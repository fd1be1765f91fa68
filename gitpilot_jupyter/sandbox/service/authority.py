"""Who may change the sandbox settings, and how far: the administrator's word.

The settings are one file per server and apply to every run on it, whoever asks.
So where identities are real (an identity provider with users: JupyterHub, a
custom one) only the server's owners change them; other users read them. Under a
shared secret (jupyter_server's token or password) every caller is one principal,
the token's holder, and in a process of its own (the CLI, a kernel) the person who
started it: no owner check there.

A change that weakens a wall for every later run is the administrator's to allow,
never a caller's ``confirm``: ``off`` only when listed in the allowed backends (the
resolver's check), the network on for every run only with ``user_may_weaken``, a
timeout never above the administrator's maximum. A single run may still ask for
the network in its own plan, which its approver sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import SettingNotAllowed

#: The trait that names the owners (said in each refusal).
OWNERS_TRAIT = "c.SandboxApp.settings_owners"
#: The trait that lets owners weaken a wall (said in each refusal).
WEAKEN_TRAIT = "c.SandboxApp.user_may_weaken"


@dataclass(frozen=True)
class SettingsAuthority:
    """Who changes the settings and whether they may weaken a wall.

    ``owners``: the users who may change them where identities are real; ``None``
    where there are none to tell apart (a process of its own). ``may_weaken``:
    ``None`` lets the one principal (a caller without a name, or anyone when
    ``owners`` is ``None``) weaken, and no named user.
    """

    owners: frozenset[str] | None = None
    may_weaken: bool | None = None

    @classmethod
    def for_server(cls, owners: Iterable[str], may_weaken: bool | None = None) -> SettingsAuthority:
        """A server's authority: its named ``owners`` (an empty list names none)."""
        return cls(frozenset(n for n in owners if n), may_weaken)

    def weakening_allowed(self, user: str | None) -> bool:
        """Whether ``user`` may save a change that weakens a wall."""
        if self.may_weaken is not None:
            return self.may_weaken
        return user is None or self.owners is None

    def check(
        self,
        changes: Mapping[str, object],
        *,
        user: str | None,
        network_now: bool,
        max_timeout_sec: int,
    ) -> None:
        """Refuse ``changes`` (:class:`SettingNotAllowed`, 403) that ``user`` may not save.

        ``network_now``: whether the settings in force already turn the network on
        (keeping it on weakens nothing). Nothing is saved when this raises.
        """
        if user is not None and self.owners is not None and user not in self.owners:
            named = f"its owners are {sorted(self.owners)}" if self.owners else "it names none"
            raise SettingNotAllowed(
                f"only the server's owner changes the sandbox settings (they apply to every "
                f"run on this server), and {user!r} is not its owner: {named}. The "
                f"administrator names the owners with {OWNERS_TRAIT}. Nothing was saved."
            )
        timeout = changes.get("timeout_sec")
        if isinstance(timeout, int) and timeout > max_timeout_sec:
            raise SettingNotAllowed(
                f"timeout_sec {timeout} is above this server's maximum of {max_timeout_sec} s, "
                "set by the administrator (c.SandboxApp.max_timeout_sec). Nothing was saved."
            )
        weakens = changes.get("allow_network") is True and not network_now
        if weakens and not self.weakening_allowed(user):
            raise SettingNotAllowed(
                "allow_network: turning the network on for every run is set by the "
                f"administrator ({WEAKEN_TRAIT} = True allows it); a single run may still "
                "ask for it in its own plan. Nothing was saved."
            )
