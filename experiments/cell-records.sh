# Sourced by the experiment scripts: keep a comparison's finished cells in git, so that a fresh checkout resumes after
# the last finished cell (run folders under runs/ do not travel between machines; records are small, weights stay).
#   restore_records CELLS RECORDS               copy the tracked records back into the cells folder
#   keep_records CELLS RECORDS WHAT             archive the finished cells' records and commit that folder alone
#   restore_files FOLDER RECORDS                copy tracked files back into a plain folder (a paraphraser's cache)
#   keep_files FOLDER RECORDS WHAT              copy the folder's new files into RECORDS and commit that folder alone
#   keep_every SECONDS COMMAND [ARGS ...]       run a keep command every SECONDS in the background, until the
#                                               calling script exits (once per script: it owns the EXIT trap)
restore_records() { .venv/bin/python scripts/cell_records.py restore "$1" "$2"; }
keep_records() {
  .venv/bin/python scripts/cell_records.py archive "$1" "$2" >/dev/null
  commit_folder "$2" "$3"
}
restore_files() { [ ! -d "$2" ] || { mkdir -p "$1" && cp -rn "$2/." "$1/"; }; }
keep_files() {
  [ ! -d "$1" ] || { mkdir -p "$2" && cp -rn "$1/." "$2/"; }
  commit_folder "$2" "$3"
}
commit_folder() {
  [ -d "$1" ] || return 0  # nothing has finished yet
  git add "$1" && { git diff --cached --quiet -- "$1" || git commit -q -m "records: $2" -- "$1"; } ||
    echo "could not commit $1; commit it by hand" >&2
}
keep_every() {
  local seconds=$1; shift
  ( while sleep "$seconds"; do "$@"; done ) &
  trap "kill $!" EXIT
}
