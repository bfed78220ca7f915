"""Data access for users and API tokens.

Tokens: the secret is ``stg_`` + 43 url-safe random characters; only its sha256 and its first 12
characters (the prefix, to recognise it in a list) are stored. A user has one role; every token of
a user carries that role.

Every function is keyword-only, takes a `Session` with no transaction in progress, runs one unit of
work in one ``with session.begin():`` block and returns domain objects.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import domain as d
from service.db import convert
from service.db.models import TokenRow, UserRow, utcnow
from service.db.paging import keyset

TOKEN_PREFIX = "stg_"
PREFIX_SHOWN = 12


def hash_secret(secret: str) -> str:
    """sha256 hex digest of a token secret (what the database stores)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh random token secret (256 bits of entropy)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _user(session: Session, name: str, role: d.Role) -> UserRow:
    if role not in d.ROLES:
        raise ValueError(f"role must be one of {', '.join(d.ROLES)}, not {role!r}")
    user = session.scalars(select(UserRow).where(UserRow.name == name)).one_or_none()
    if user is None:
        user = UserRow(name=name, role=role)
        session.add(user)
        session.flush()
    elif user.role != role:
        raise d.Conflict(f"user {name!r} exists with role {user.role!r}, not {role!r}")
    return user


def create_token(session: Session, *, name: str, role: d.Role) -> d.IssuedToken:
    """Create a token for user ``name`` (created with ``role`` if new; Conflict if its role differs)."""
    secret = new_secret()
    with session.begin():
        user = _user(session, name, role)
        tok = TokenRow(user_id=user.id, prefix=secret[:PREFIX_SHOWN], token_hash=hash_secret(secret))
        session.add(tok)
        session.flush()
        return d.IssuedToken(secret=secret, info=convert.token_info(tok, user))


def ensure_token(session: Session, *, name: str, role: d.Role, secret: str) -> d.TokenInfo:
    """Make sure a token with exactly ``secret`` exists for ``name`` (bootstrap; idempotent)."""
    if len(secret) < 16:
        raise ValueError("a bootstrap token secret must be at least 16 characters")
    with session.begin():
        user = _user(session, name, role)
        digest = hash_secret(secret)
        tok = session.scalars(select(TokenRow).where(TokenRow.token_hash == digest)).one_or_none()
        if tok is None:
            tok = TokenRow(user_id=user.id, prefix=secret[:PREFIX_SHOWN], token_hash=digest)
            session.add(tok)
            session.flush()
        elif tok.user_id != user.id:
            raise d.Conflict("that secret already belongs to another user")
        return convert.token_info(tok, user)


def verify_token(session: Session, *, secret: str) -> d.Principal | None:
    """The caller a secret belongs to, or None (unknown or revoked)."""
    with session.begin():
        row = session.execute(
            select(TokenRow, UserRow)
            .join(UserRow, UserRow.id == TokenRow.user_id)
            .where(TokenRow.token_hash == hash_secret(secret), TokenRow.revoked_at.is_(None))
        ).one_or_none()
        if row is None:
            return None
        tok, user = row
        return d.Principal(user_id=user.id, name=user.name, role=user.role, token_id=tok.id)  # type: ignore[arg-type]


def revoke_token(session: Session, *, token_id: int) -> d.TokenInfo:
    """Revoke a token (it stops authenticating at once); NotFound if there is none."""
    with session.begin():
        row = session.execute(
            select(TokenRow, UserRow).join(UserRow).where(TokenRow.id == token_id)
        ).one_or_none()
        if row is None:
            raise d.NotFound(f"no token {token_id}")
        tok, user = row
        if tok.revoked_at is None:
            tok.revoked_at = utcnow()
        return convert.token_info(tok, user)


def list_tokens(session: Session, *, after: int | None = None, limit: int | None = None) -> list[d.TokenInfo]:
    """Every token (prefixes only), oldest first."""
    with session.begin():
        q = select(TokenRow, UserRow).join(UserRow).order_by(TokenRow.id)
        rows = session.execute(keyset(q, TokenRow.id, after=after, limit=limit)).all()
        return [convert.token_info(t, u) for t, u in rows]
