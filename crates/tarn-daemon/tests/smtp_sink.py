"""SMTP sink for tarn's alert tests: a real SMTP server (aiosmtpd) that
saves every message it accepts.

usage: smtp_sink.py OUTDIR PORTFILE [--tls CERT KEY] [--auth USER PASSWORD]

Listens on 127.0.0.1 at a free port and writes that port to PORTFILE once it
accepts connections. Each message becomes OUTDIR/NNNN.eml: two lines
`X-Envelope-From:` / `X-Envelope-To:` and then the message as received.
--tls requires STARTTLS with that certificate; --auth requires AUTH (after
STARTTLS) with that user and password. Exits when its stdin closes, so it
never outlives the test that started it.
"""

import asyncio
import os
import socket
import ssl
import sys
import warnings

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


class Saver:
    def __init__(self, outdir):
        self.outdir = outdir
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        head = "X-Envelope-From: {}\nX-Envelope-To: {}\n".format(
            envelope.mail_from, ", ".join(envelope.rcpt_tos)
        )
        data = envelope.original_content or envelope.content
        if isinstance(data, str):
            data = data.encode()
        tmp = os.path.join(self.outdir, ".{}.tmp".format(self.count))
        with open(tmp, "wb") as f:
            f.write(head.encode() + data)
        # Renamed into place whole before the 250 reply goes out.
        os.rename(tmp, os.path.join(self.outdir, "{:04}.eml".format(self.count)))
        return "250 Message accepted for delivery"


def option(args, name, count):
    if name not in args:
        return None
    i = args.index(name)
    return args[i + 1 : i + 1 + count]


async def main():
    # aiosmtpd warns about its own deprecated Session.login_data on every AUTH.
    warnings.simplefilter("ignore", DeprecationWarning)
    args = sys.argv[1:]
    outdir, portfile = args[0], args[1]
    kwargs = {}
    tls = option(args, "--tls", 2)
    if tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls[0], tls[1])
        kwargs.update(tls_context=context, require_starttls=True)
    auth = option(args, "--auth", 2)
    if auth:
        user, password = auth[0].encode(), auth[1].encode()

        def authenticator(server, session, envelope, mechanism, auth_data):
            ok = (
                isinstance(auth_data, LoginPassword)
                and auth_data.login == user
                and auth_data.password == password
            )
            # handled=False: aiosmtpd sends the 535 reply itself.
            return AuthResult(success=ok, handled=False)

        kwargs.update(authenticator=authenticator, auth_required=True, auth_require_tls=True)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    handler = Saver(outdir)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(handler, hostname="localhost", **kwargs), sock=sock
    )
    with open(portfile + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    await loop.run_in_executor(None, sys.stdin.buffer.read)
    server.close()


asyncio.run(main())
