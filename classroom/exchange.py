"""nbgrader's exchange on a shared machine (the class hub), with the one check nbgrader leaves as a warning enforced.

nbgrader's exchange is a folder every account can write into. A submission is a folder
``inbound/<student>+<assignment>+<timestamp>+<random>`` and ``nbgrader collect`` takes the newest per student, by the
name. Any account can make a folder under any name (``nbgrader submit --student=someone_else`` does it), and
nbgrader's ``CollectApp.check_owner`` only logs "cheating attempt?" and collects it anyway: a student could replace
a classmate's submission with their own file. :class:`OwnerCheckedCollect` collects a submission only when the
Unix owner of its folder is the student its name claims, and lists every refused one.

nbgrader makes ``inbound/`` mode 0733 (anyone may create, nobody but the teacher may list) but without the sticky
bit, so any account can *rename* a classmate's submission folder out of the way (a rename inside one folder needs
only write access to that folder). :class:`StickyReleaseAssignment` adds the sticky bit (1733, as /tmp has): an
entry can then be renamed or removed only by its owner.

``nbgrader submit`` makes each submission folder 0777 ("so the instructor can delete later. Hidden from other users
by the timestamp"): whoever learns its name can delete or replace the files in it. :class:`PrivateSubmit` leaves it
0755: only its owner (and root) can change it. The teacher then clears old submissions as root.

``nbgrader collect`` follows symbolic links: a student's own folder holding a link to the teacher's source notebook
was collected as the solutions, a link named after a classmate's submission passed nbgrader's owner check (``stat``
follows the link), a link to ``/dev/zero`` filled the course folder; one malformed entry (a bad timestamp, a dangling
link, a FIFO, a plain file, 1,100 nested folders) stopped the whole collect. :class:`OwnerCheckedCollect` looks at
every entry with ``lstat`` only: a submission must be a real folder its claimed student owns, and it is copied
through file descriptors opened with ``O_NOFOLLOW`` (a link swapped in later is not followed either), regular files
and folders only, :data:`MAX_DEPTH` folders deep, within nbgrader's size limits. Every refused entry is a
``REFUSED`` line in collect's log (the teacher's report), and the classmates are collected.

The hub's ``nbgrader_config.py`` selects it (``c.ExchangeFactory.collect``); docs/hub.md says what else the
exchange guarantees (unlistable inbound and feedback folders, random submission names, submission folders only
their owner can change).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import pwd
import shutil
import stat

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect, groupby
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import check_mode


MAX_DEPTH = 12  # folders inside one submission that are copied
MAX_ENTRIES = 5_000  # entries of one submission that are looked at


def owner_of(path: str) -> str:
    """The account that owns ``path`` itself (``lstat``: a symbolic link's own owner, never its target's)."""
    uid = os.lstat(path).st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _shown(name: str) -> str:
    return ascii(os.fsencode(name).decode("utf-8", errors="backslashreplace"))


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a file")):
        if test(mode):
            return what
    return "not a folder"


class Refused(Exception):
    pass


def copy_submission(src: str, dest: str, *, ignore=(), max_file_bytes: int, max_total_bytes: int, refused: list) -> None:
    """Copy the folder ``src`` to ``dest`` through file descriptors: ``src`` and every folder below it opened with
    O_NOFOLLOW|O_DIRECTORY, every file with O_NOFOLLOW|O_NONBLOCK and checked to be regular on the open file;
    links, FIFOs, devices and sockets are skipped, each a line in ``refused``; Refused when ``src`` is not a folder
    or the whole is larger than ``max_total_bytes``."""
    flags_dir = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        top = os.open(src, flags_dir)
    except OSError as e:
        raise Refused(f"it is not a folder ({e.strerror})") from None
    budget = {"bytes": max_total_bytes, "entries": MAX_ENTRIES}

    def copy_dir(fd: int, out: str, rel: str, depth: int) -> None:
        os.makedirs(out, exist_ok=True)
        for name in sorted(os.listdir(fd)):
            budget["entries"] -= 1
            if budget["entries"] < 0:
                raise Refused(f"more than {MAX_ENTRIES} entries")
            where = f"{rel}/{name}" if rel else name
            if any(fnmatch.fnmatch(name, pat) for pat in ignore):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 > MAX_DEPTH:
                    refused.append(f"{_shown(where)}: more than {MAX_DEPTH} folders deep; not collected")
                    continue
                sub = os.open(name, flags_dir, dir_fd=fd)
                try:
                    copy_dir(sub, os.path.join(out, name), where, depth + 1)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                try:
                    f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                                dir_fd=fd)
                except OSError as e:
                    refused.append(f"{_shown(where)}: could not be opened ({e.strerror}); not collected")
                    continue
                try:
                    fst = os.fstat(f)
                    if not stat.S_ISREG(fst.st_mode):
                        refused.append(f"{_shown(where)}: {_kind(fst.st_mode)}; not collected")
                        continue
                    if fst.st_size > max_file_bytes:
                        refused.append(f"{_shown(where)}: larger than {max_file_bytes} bytes; not collected")
                        continue
                    with open(os.path.join(out, name), "wb") as w:
                        left = max_file_bytes
                        while left > 0:
                            chunk = os.read(f, min(1 << 20, left))
                            if not chunk:
                                break
                            left -= len(chunk)
                            budget["bytes"] -= len(chunk)
                            if budget["bytes"] < 0:
                                raise Refused(f"larger than {max_total_bytes} bytes in all")
                            w.write(chunk)
                finally:
                    os.close(f)
            else:
                refused.append(f"{_shown(where)}: {_kind(st.st_mode)}; not collected (regular files only)")

    try:
        copy_dir(top, dest, "", 0)
    finally:
        os.close(top)


class StickyReleaseAssignment(ExchangeReleaseAssignment):
    """``nbgrader release_assignment`` that makes ``inbound/`` sticky (1733): no student can rename or remove
    another's submission."""

    def init_dest(self):
        super().init_dest()
        mode = os.stat(self.inbound_path).st_mode
        if not mode & stat.S_ISVTX:
            os.chmod(self.inbound_path, stat.S_IMODE(mode) | stat.S_ISVTX)


class PrivateSubmit(ExchangeSubmit):
    """``nbgrader submit`` whose submission folder only its owner can change (0755, not nbgrader's 0777)."""

    def copy_files(self):
        super().copy_files()
        os.chmod(os.path.join(self.inbound_path, self.assignment_filename), 0o755)


class OwnerCheckedCollect(ExchangeCollect):
    """``nbgrader collect`` that refuses a submission whose folder is not owned by the student it names."""

    refused: list[str]

    def init_src(self):
        if self.coursedir.course_id == '':
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, 'inbound')
        if not os.path.isdir(self.inbound_path):
            self.fail("Course not found: {}".format(self.inbound_path))
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail("You don't have read permissions for the directory: {}".format(self.inbound_path))
        if not os.stat(self.inbound_path).st_mode & stat.S_ISVTX:
            self.log.error("%s is not sticky: a student can rename another's submission; release with "
                           "classroom.exchange.StickyReleaseAssignment (the hub's nbgrader_config.py does)",
                           self.inbound_path)
        student_id = self.coursedir.student_id if self.coursedir.student_id else '*'
        pattern = os.path.join(self.inbound_path, '{}+{}+*'.format(student_id, self.coursedir.assignment_id))
        records, self.refused = [], []
        for path in sorted(glob.glob(pattern)):
            name = os.path.basename(path)
            try:
                st = os.lstat(path)  # the entry itself: a link is refused, never followed
                if not stat.S_ISDIR(st.st_mode):
                    raise Refused(f"it is {_kind(st.st_mode)}, not a folder")
                try:
                    record = self._path_to_record(path)
                except (Exception, SystemExit) as e:  # noqa: BLE001 - nbgrader's fail() exits; a bad timestamp
                    raise Refused(f"its name is not <student>+<assignment>+<timestamp>+<random> "
                                  f"({type(e).__name__})") from None
                owner = owner_of(path)
                if owner != record['username']:
                    raise Refused(f"it claims to be submitted by {record['username']!r} but its owner is {owner!r}")
            except (Refused, OSError) as e:
                self.refused.append(name)
                self.log.error("REFUSED %s: %s; not collected", _shown(name), e)
                continue
            records.append(record)
        usergroups = groupby(records, lambda item: item['username'])
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        if self.duedate is None or not self.before_duedate:
            self.src_records = [self._sort_by_timestamp(v)[0] for v in usergroups.values()]
        else:
            self.src_records = []
            for v in usergroups.values():
                ordered = self._sort_by_timestamp(v)
                before = [r for r in ordered if r['timestamp'] <= self.duedate]
                self.src_records.append(before[0] if before else ordered[0])

    def do_copy(self, src, dest, log=None):
        """nbgrader's copy (``shutil.copytree``, which follows links) replaced by :func:`copy_submission`; a
        submission that cannot be copied is removed from the course folder and listed, the others go on."""
        refused: list[str] = []
        try:
            copy_submission(src, dest, ignore=tuple(self.coursedir.ignore),
                            max_file_bytes=1000 * self.coursedir.max_file_size,
                            max_total_bytes=1000 * self.coursedir.max_dir_size, refused=refused)
        except (Refused, OSError) as e:
            shutil.rmtree(dest, ignore_errors=True)
            self.refused.append(os.path.basename(src))
            self.log.error("REFUSED %s: %s; not collected", _shown(os.path.basename(src)), e)
            return
        for line in refused:
            self.log.error("REFUSED %s in %s; the rest of the submission is collected", line,
                           _shown(os.path.basename(src)))

    def copy_files(self):
        """nbgrader's copy, one submission at a time: an error in one is a REFUSED line, the class goes on (the
        owner was checked with lstat in :meth:`init_src`; nbgrader's own check follows links, so it is off)."""
        self.check_owner = False
        records = self.src_records
        try:
            for rec in records:
                self.src_records = [rec]
                try:
                    super().copy_files()
                except (Exception, SystemExit) as e:  # noqa: BLE001
                    self.refused.append(rec['filename'])
                    self.log.error("REFUSED %s: %s; not collected", _shown(rec['filename']), type(e).__name__)
        finally:
            self.src_records = records
