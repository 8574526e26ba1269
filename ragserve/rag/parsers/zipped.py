"""Office files (docx, xlsx) are zips, and a small one can unpack to gigabytes: their parts are
re-packed under a size limit before a parsing library reads them."""

import io
import zipfile

from ragserve.rag.parsers.document import ParseError

# python-docx and openpyxl inflate parts whole into memory: a few hundred kB can declare
# gigabytes. A long document or sheet is a few tens of MB of XML, and images are stored about
# as large as they are packed, so more than this is refused before anything is inflated.
MAX_UNPACKED_BYTES = 64 << 20


def repacked(data: bytes, name: str, kind: str) -> bytes:
    """The file's parts, inflated piece by piece and re-packed uncompressed; kind ("docx",
    "xlsx") names the format in errors.

    Libraries read each part whole, and zipfile, asked for a whole part, inflates all of its
    compressed bytes before cutting them to the size the directory declares, which a bomb can
    understate. Read in pieces, zipfile yields no more than a part declares: so a bomb that
    declares its size is refused before anything is inflated, and one that understates it is
    cut short (and fails its CRC check, or its XML)."""
    out = io.BytesIO()
    try:
        with (
            zipfile.ZipFile(io.BytesIO(data)) as archive,
            zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as stored_archive,
        ):
            parts = [info for info in archive.infolist() if not info.is_dir()]
            declared = sum(info.file_size for info in parts)
            if declared > MAX_UNPACKED_BYTES:
                raise ParseError(
                    f"{name}: refused: its parts unpack to {declared} bytes, more than the "
                    f"{MAX_UNPACKED_BYTES} a {kind} may (a zip bomb?)"
                )
            for info in parts:
                with (
                    archive.open(info) as part,
                    stored_archive.open(info.filename, "w") as out_part,
                ):
                    while piece := part.read(1 << 20):
                        out_part.write(piece)
    except ParseError:
        raise
    # zipfile reports a damaged archive through several exception types (BadZipFile, ValueError,
    # EOFError, an unsupported-feature error for a bogus version); each is this file's error.
    except Exception as error:
        raise ParseError(f"{name}: not a readable {kind} file ({error})") from error
    return out.getvalue()
