"""Media for the tests, made here: images with Pillow, and PDFs written byte by byte (a
text layer in Helvetica, one page per text) or by Pillow (a page that is only a picture,
as a scanner writes)."""

from __future__ import annotations

import base64
import io


def png(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def data_url(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(pages: list[str], title: str = "") -> bytes:
    """A PDF whose pages hold these texts (one line each), titled `title`."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]  # the page tree is filled below
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")  # 3
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({_escaped(text)}) Tj ET".encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>" % content
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    info = None
    if title:
        objects.append(b"<< /Title (%s) >>" % _escaped(title).encode("latin-1"))
        info = len(objects)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    trailer = b"/Size %d /Root 1 0 R" % (len(objects) + 1)
    if info is not None:
        trailer += b" /Info %d 0 R" % info
    out.write(b"trailer\n<< %s >>\nstartxref\n%d\n%%%%EOF\n" % (trailer, xref))
    return out.getvalue()


def scanned_pdf(pages: int = 2) -> bytes:
    """A PDF of pictures only: no text layer."""
    from PIL import Image

    images = [Image.new("RGB", (200, 260), (255, 255, 255)) for _ in range(pages)]
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:])
    return out.getvalue()
