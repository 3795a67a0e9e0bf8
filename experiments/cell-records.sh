# Sourced by the experiment scripts: keep a comparison's finished cells in git, so that a fresh checkout resumes after
# the last finished cell (run folders under runs/ do not travel between machines; records are small, weights stay).
#   restore_records CELLS RECORDS               copy the tracked records back into the cells folder
#   keep_records CELLS RECORDS WHAT             archive the finished cells' records and commit that folder alone
#   keep_records_every SECONDS CELLS RECORDS [CELLS RECORDS ...]
#                                               the same in the background, until the calling script exits
restore_records() { .venv/bin/python scripts/cell_records.py restore "$1" "$2"; }
keep_records() {
  .venv/bin/python scripts/cell_records.py archive "$1" "$2" >/dev/null
  [ -d "$2" ] || return 0  # no cell has finished yet
  git add "$2" && { git diff --cached --quiet -- "$2" || git commit -q -m "records: $3" -- "$2"; } ||
    echo "could not commit $2; commit it by hand" >&2
}
keep_records_every() {
  local seconds=$1; shift
  local pairs=("$@")
  ( while sleep "$seconds"; do
      for ((i = 0; i < ${#pairs[@]}; i += 2)); do
        keep_records "${pairs[i]}" "${pairs[i+1]}" "finished cells of ${pairs[i]}, as they land"
      done
    done ) &
  trap "kill $!" EXIT
}
