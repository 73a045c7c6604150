# perf/plot_loss.gp: plots the loss.csv that perf/bench_loss.sh writes.
#   gnuplot -e "csv='...loss.csv'; png='...loss.png'" perf/plot_loss.gp
# Columns: 1 setting (none, loss=1, ...), 2 mode (go-back-N, selective), 3/4 write GB/s and
# ratio, 5/6 read GB/s and ratio; each setting's rows in the modes' order, go-back-N first.
if (!exists("csv")) csv = 'loss.csv'
if (!exists("png")) png = 'loss.png'
set terminal pngcairo size 1200,650 font 'sans,11'
set output png
set datafile separator ','
set title "vrnic, two vrnicd on the udp port: 64 KiB throughput under faults, as a ratio to none"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:1.2]
set grid ytics
set key top right box opaque
set xlabel 'faults on both vrnicd (vrnicctl faults)'
set ylabel 'throughput / loss-free throughput'
plot csv every 2::1 using 4:xtic(1) title 'ib\_write\_bw, go-back-N', \
     ''  every 2::2 using 4 title 'ib\_write\_bw, selective repeat', \
     ''  every 2::1 using 6 title 'ib\_read\_bw, go-back-N', \
     ''  every 2::2 using 6 title 'ib\_read\_bw, selective repeat'
