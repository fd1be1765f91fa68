"""The kernel face: ``%%sandbox`` / ``%sandbox`` magics and the client they call."""
