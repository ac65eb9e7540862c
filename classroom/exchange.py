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

The hub's ``nbgrader_config.py`` selects it (``c.ExchangeFactory.collect``); docs/hub.md says what else the
exchange guarantees (unlistable inbound and feedback folders, random submission names, submission folders only
their owner can change).
"""

from __future__ import annotations

import glob
import os
import pwd
import stat

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect, groupby
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import check_mode


def owner_of(path: str) -> str:
    try:
        return pwd.getpwuid(os.stat(path).st_uid).pw_name
    except KeyError:
        return f"uid {os.stat(path).st_uid}"


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
        for path in glob.glob(pattern):
            record = self._path_to_record(path)
            owner = owner_of(path)
            if owner != record['username']:
                self.refused.append(os.path.basename(path))
                self.log.error("REFUSED %s: it claims to be submitted by %r but its owner is %r; not collected",
                               os.path.basename(path), record['username'], owner)
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
